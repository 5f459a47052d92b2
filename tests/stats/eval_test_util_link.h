// The eval tests' process helpers, shared with the stats tests.
#pragma once

#include "eval/eval_test_util.h"
