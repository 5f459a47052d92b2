// Registers the evaluation and statistics functions on the extension module (eval_bindings.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace kvdice::python {
void bind_eval(nanobind::module_& m);
}
