// What row_kernels_impl.h reads besides ATen's vectors, included by the AVX2 and AVX-512 copies
// before their target pragma: an inline function of these headers is then compiled for the
// build's baseline only, never for a wider instruction set that a CPU without it would run
// wherever the linker kept that copy. (Vectorized itself lives in a namespace per capability.)
#pragma once
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "../../core/executor.h"
#include "../../core/extreme.h"
#include "row_kernels.h"
