// Stand-in for HIP's runtime header on the emulator: everything comes from cuda_prelude.h.
#pragma once
