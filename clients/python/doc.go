// Package python holds the Python client of leaselog (package leaselog, in
// this directory: a client, a worker and their unittest tests) and the Go
// test that runs those tests against the real binary, so that `go test ./...`
// and `make test` cover it. It has no Go code of its own.
package python
