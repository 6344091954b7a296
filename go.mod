module github.com/codecell/codecell

go 1.26.8

require (
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/sys v0.49.0
)

require github.com/coder/websocket v1.8.15

require (
	github.com/jezek/xgb v1.1.1 // indirect
	golang.org/x/image v0.47.0 // indirect
)
