module github.com/codecell/codecell

go 1.26.8

require (
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/sys v0.49.0
)

require github.com/coder/websocket v1.8.15

require (
	github.com/aquasecurity/go-pep440-version v0.0.1 // indirect
	github.com/aquasecurity/go-version v0.0.1 // indirect
	github.com/jezek/xgb v1.1.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/image v0.47.0 // indirect
	golang.org/x/xerrors v0.0.0-20231012003039-104605ab7028 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
