# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian machine.
BUILD ?= build
JOBS ?= $(shell nproc)
# The CUDA backend is compiled wherever nvcc exists (CI too); it runs only where a GPU is visible.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_FLAGS := $(if $(NVCC),-DKVDICE_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC),-DKVDICE_CUDA=OFF)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: deps build test demo clean format

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) $(CUDA_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)/kvdice

format:
	clang-format -i $$(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp')

clean:
	rm -rf $(BUILD)
