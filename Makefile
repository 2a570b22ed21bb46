# Thin wrapper over CMake presets. The README's two commands:
#   make start   install what is needed, build, start inferd on a generated model
#   make test    install what is needed, build, run every test (ctest)
BUILD ?= build/release
JOBS  ?= $(shell nproc)

.PHONY: all setup build start test test-asan fuzz format clean

all: build

setup:
	@bash scripts/setup.sh

build:
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

start: setup build
	@bash scripts/start.sh

test: setup build
	@bash scripts/test.sh

test-asan: setup
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@cd build/asan && ctest -L 'unit|fuzz|kernels' --output-on-failure -j $(JOBS)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
