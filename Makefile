# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian machine.
BUILD ?= build
JOBS ?= $(shell nproc)
# `make test`: the CUDA backend is compiled wherever nvcc exists (CI too); it runs only where a GPU is
# visible.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_FLAGS := $(if $(NVCC),-DKVDICE_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC),-DKVDICE_CUDA=OFF)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
# `make demo` builds only the CLI, in its own directory, and compiles the CUDA kernels only when a GPU
# answers nvidia-smi (or CUDA=1 asks for them): compiling them is most of a build and useless without
# a GPU. CUDA=0 leaves them out even with a GPU.
DEMO_BUILD ?= build-demo
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
CUDA ?= $(if $(and $(NVCC),$(HAVE_GPU)),1,0)
DEMO_CUDA_FLAGS := $(if $(filter 1,$(CUDA)),-DKVDICE_CUDA=ON $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC)),-DKVDICE_CUDA=OFF)

.PHONY: deps build test demo clean format

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) $(CUDA_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: deps
	@echo "make demo: configuring $(DEMO_BUILD)/ (CUDA backend: $(if $(filter 1,$(CUDA)),on,off); tests: not built)"
	@cmake -S . -B $(DEMO_BUILD) -G Ninja $(CMAKE_FLAGS) $(DEMO_CUDA_FLAGS) -DKVDICE_TESTS=OFF > /dev/null
	@echo "make demo: compiling the kvdice CLI with $(JOBS) jobs (a few minutes on 2 cores; progress [done/total])"
	@cmake --build $(DEMO_BUILD) -j $(JOBS) --target kvdice
	bash scripts/demo.sh $(DEMO_BUILD)/kvdice

format:
	clang-format -i $$(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp')

clean:
	rm -rf $(BUILD) $(DEMO_BUILD)
