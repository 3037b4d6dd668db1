// Stand-in for CUDA's cuda_bf16.h on the emulator: __nv_bfloat16 and its helpers come from cuda_prelude.h.
#pragma once
