#!/usr/bin/env bash
# Installs every build and test dependency of Drift from Debian packages (and the npm test oracle).
# Idempotent: packages already present are skipped, so CI and the quick start can both call it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev pybind11-dev
  nodejs
  tmux  # tests/cli/chat_test.cc types into `drift chat` on a terminal
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "install_deps: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
