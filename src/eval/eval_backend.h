// The one place the evaluation harness creates its compute backend from `--backend`, so switching
// to backend::make_backend(BackendOptions) is a one-function change.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace kvdice::eval {

// "cpu", "cuda" or "auto" (the best one built in); Error naming the flag otherwise.
std::unique_ptr<backend::Backend> make_eval_backend(const std::string& name, int threads);

}  // namespace kvdice::eval
