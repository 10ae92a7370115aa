# The two commands of the quick start, and their parts.
#   make run   install what is missing, build, plan the bundled tiny-hybrid model
#   make test  install what is missing, build (warnings are errors), run every
#              test through ctest, then again in an ASan+UBSan build
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: run test deps build build-asan test-asan bench clean

run: build
	./$(BUILD)/octopipe plan models/tiny-hybrid.yaml --devices 4

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

test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

bench: build
	./$(BUILD)/sim_speed
	./$(BUILD)/plan_baselines

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
