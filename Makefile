# The two commands: `make serve` installs what is missing, builds, and starts
# the server with embedded defaults; `make test` runs every test.
DATA_DIR ?= /var/lib/codecell

.PHONY: deps build serve test bench fuzz

deps:
	./scripts/deps.sh

build:
	go build -o codecell ./cmd/codecell

serve: deps build
	./codecell serve --data-dir $(DATA_DIR)

test: deps
	go vet ./...
	test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	go test -count=1 -timeout 20m ./...
	go test -run '^$$' -fuzz FuzzCode -fuzztime 10s ./internal/extract
	go test -run '^$$' -fuzz FuzzExecuteRequest -fuzztime 10s ./internal/server

bench: deps build
	./codecell bench --data-dir /tmp/codecell-bench
