// The eval tests' process utilities, shared with the stats tests.
#pragma once

#include "eval/eval_test_util.h"
