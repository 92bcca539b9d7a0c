// Host switch for programmatic dependent launch (kernels/pdl.cuh): on unless DRIFT_PDL=0, until
// set_pdl_enabled. Work captured into a CUDA graph keeps the setting it was captured with.
#pragma once

namespace drift::backend::cuda {

bool pdl_enabled();
void set_pdl_enabled(bool on);

}  // namespace drift::backend::cuda
