// A case's step as ops/kernel_step.h reads it (the same filling of kernels::Step and
// kernels::DevicePart as the op files'): the step's fields are arrays named as core/step_layout.h
// names them (weights already fp32), `num_ranges`/`num_fixups` their lengths, the parameters
// values of their names, `rows` the output rows.
#pragma once
#include <string>

#include "../../core/step_layout.h"
#include "case_io.h"

namespace mgg::emu {

struct CaseStep {
  Case& c;

  template <typename T>
  const T* index(StepField f) const {
    return c.array<T>(kStepFieldNames[f]);
  }
  const float* weight(StepField f) const { return c.array<float>(kStepFieldNames[f]); }
  int64_t length(StepField f) const { return c.integer(std::string("num_") + kStepFieldNames[f]); }
  int64_t param(StepParam p) const { return c.integer(kStepParamNames[p]); }
  int64_t rows() const { return c.integer("rows"); }
};

}  // namespace mgg::emu
