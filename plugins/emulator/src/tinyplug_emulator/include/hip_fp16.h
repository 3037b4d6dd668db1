// Stand-in for HIP's hip_fp16.h on the emulator: half and its helpers come from cuda_prelude.h.
#pragma once
