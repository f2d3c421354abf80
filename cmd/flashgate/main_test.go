package main

// The tests of this folder run the built binary as real processes: as an
// operator runs it (exit codes, messages), and as the whole pipeline
// (gateway with its relay, RabbitMQ, consumers, MySQL), with processes
// killed by SIGKILL and RabbitMQ and MariaDB stopped and restarted by
// deploy/local/service.sh. Every test has its own Redis key prefix,
// exchange, queues and MySQL database (localstack.Isolated, Database).
//
// Files: proc_test.go builds the binary and starts processes; stack_test.go
// is one test's private pipeline and the checks of what reached MySQL;
// buyers_test.go is the crowd; the tests are grouped by what they break.
//
// Tests of this package stop shared services, so the package holds
// .run/faults.lock exclusively while it runs; every other package whose
// tests use RabbitMQ or MariaDB holds it shared. `go test ./...` thus runs
// this package alone against those services, and everything else in
// parallel as usual.

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain: these tests stop and restart RabbitMQ and MariaDB, so no other
// package's tests may use them meanwhile (StopsServices); the binary built
// for them is removed after them; every process a test starts is waited
// for, and every client closed, by its cleanup, so that no goroutine
// outlives the tests.
func TestMain(m *testing.M) {
	localstack.Main(m, localstack.StopsServices())
}
