// Package localstack is the local stack of `make up` as the tests see it: where
// the repository is, the lock that keeps fault tests (which stop and restart
// RabbitMQ and MariaDB) from running while other packages use those
// services, and the service control script. It is imported by tests only.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Root returns the repository root: the nearest folder above the working
// directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("stack: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Lock takes .run/faults.lock: shared by every test package that uses
// RabbitMQ or MariaDB, exclusive for the package whose tests stop and
// restart them. It blocks (up to 20 minutes) until it has the lock; call the
// returned function to release it.
func Lock(exclusive bool) (func(), error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(root, ".run", "faults.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(20 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%s: still locked by another test package after 20m", f.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Service runs deploy/local/service.sh action name (start, stop, restart or
// kill of redis, rabbitmq or mariadb), bounded by ctx, and returns its output.
func Service(ctx context.Context, action, name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", "service.sh"), action, name).CombinedOutput()
	return string(out), err
}

// Run is the body of TestMain for a package whose tests use RabbitMQ or
// MariaDB: it holds the fault lock (exclusive for the package that stops
// and restarts them) while the tests run, and returns their exit code.
func Run(m *testing.M, exclusive bool) int {
	unlock, err := Lock(exclusive)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	defer unlock()
	return m.Run()
}
