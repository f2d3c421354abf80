// Package localstack is the tests' kit: the local stack of `make up` as
// the tests see it, and what every test package shares. Where the
// services are (config's defaults, which its test holds to
// deploy/local/stack.env, unless the environment points elsewhere: with
// several Redis addresses, a Redis Cluster and cluster clients); a corner
// of them for each test (a key prefix, a topology, a scratch database,
// removed when the test ends); the one TestMain (Main: the lock that keeps
// fault tests, which stop and restart RabbitMQ and MariaDB, from running
// while other packages use those services, and the goroutine leak check);
// the one wait (WaitFor); the service control script; redis-servers and
// Redis Clusters of a caller's own (StartRedisServer, PrivateRedis,
// StartRedisCluster) for tests that kill or reconfigure Redis; the one
// launcher of the flashgate binary, or any program, as a process (Build,
// Launch, LaunchT); and the
// skip of a test that needs one Redis when the tests run on a cluster
// (SingleRedisOnly). It is imported by tests and by the bench suite.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/retry"
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
			return "", errors.New("localstack: no go.mod above the working directory")
		}
		dir = parent
	}
}

// lockWait bounds Lock: a fault test package runs for minutes, not more.
const lockWait = 20 * time.Minute

// Lock takes .run/faults.lock: shared by every test package that uses
// RabbitMQ or MariaDB, exclusive for the package whose tests stop and
// restart them. It blocks (up to 20 minutes) until it has the lock; call the
// returned function to release it. Main takes it for a package's tests.
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
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	// A fixed pace: the holder is another test package, not a server that
	// a crowd of clients must not overwhelm.
	err = retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}, func(context.Context) error {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
			return retry.Stop(err)
		}
		return err
	}, nil)
	if err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: still locked by another test package after %v", f.Name(), lockWait)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
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

// serviceWait bounds one call of service.sh: RabbitMQ may take two minutes
// to start on a loaded machine, and a restart is a stop and a start.
const serviceWait = 4 * time.Minute

// Control is Service for a test: it runs action on name, logs what the
// script said, and fails tb when it failed. Before an action that takes the
// service down (stop, kill, restart) it makes sure that the service is
// started again when the test ends, whatever happens in between, so that a
// failed fault test does not take the next tests' services with it. It
// blocks for up to four minutes; call it from the test's goroutine. Only a
// package that holds the fault lock exclusively (Main with StopsServices)
// may take a service down. On a Redis Cluster it skips the test for any
// action on redis (SingleRedisOnly): the service Redis is not the
// cluster.
func Control(tb testing.TB, action, name string) {
	tb.Helper()
	if name == "redis" {
		SingleRedisOnly(tb, "service.sh "+action+" redis acts on the Redis of `make up`, not on the cluster's nodes")
	}
	if action != "start" && action != "status" {
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), serviceWait)
			defer cancel()
			if out, err := Service(ctx, "start", name); err != nil {
				tb.Errorf("restarting %s after the test: %v\n%s", name, err, out)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), serviceWait)
	defer cancel()
	out, err := Service(ctx, action, name)
	if err != nil {
		tb.Fatalf("service.sh %s %s: %v\n%s", action, name, err, out)
	}
	tb.Logf("service.sh %s %s: %s", action, name, strings.TrimSpace(out))
}
