# The two commands of the quick start, and their parts.
#   make run   install what is missing, build, plan the bundled tiny-hybrid model
#              for 4 CPU ranks, compile it, train it 20 steps under mpirun
#   make test  install what is missing, build (warnings are errors), run every
#              test through ctest, then again in an ASan+UBSan build
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: run test deps build build-asan test-asan bench bench-e2e clean

RUN_DIR ?= $(BUILD)/run-tiny-hybrid
RUN_STEPS ?= 20

# Plan (the tuned plan against the baselines), compile (docs/codegen.md),
# train: each step's loss, tokens/s and time, then the summary with the
# simulator's prediction against the measured step time.
run: build
	$(BUILD)/octopipe compile models/tiny-hybrid.yaml --devices 4 -o $(RUN_DIR)
	@echo "== training $(RUN_STEPS) steps: $(RUN_DIR)/launch --steps $(RUN_STEPS)" \
	  "(4 ranks on $$(nproc) cores; the prediction assumes a core per rank and analytic costs)"
	OPENBLAS_NUM_THREADS=1 $(RUN_DIR)/launch --steps $(RUN_STEPS)

test: deps
	cmake -S . -B $(BUILD) -DOCTO_WERROR=ON
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	$(MAKE) test-asan

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD)
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DOCTO_SANITIZE=ON -DOCTO_WERROR=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# Under the sanitizers every test runs again but cuda_kernels: it spends its
# minutes inside NVRTC compiling PTX, and our side of it (the same compile
# command) is already exercised under the sanitizers by the cli tests.
test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -E '^cuda_kernels$$'


bench: build
	./$(BUILD)/sim_speed
	./$(BUILD)/plan_baselines

# bench/e2e_cpu.sh: tuned vs 1f1b vs i1f1b trained on 2 ranks, measured
# against the simulator (docs/codegen.md).
bench-e2e: build
	bash bench/e2e_cpu.sh $(BUILD)/octopipe $(BUILD)/bench-e2e

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
