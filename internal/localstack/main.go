package localstack

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// MainOption says what Main must know of a test package: how it uses the
// services, what it undoes after its tests, which library goroutines
// outlive them by design.
type MainOption func(*mainOptions)

type mainOptions struct {
	lock   bool // hold the fault lock while the tests run
	excl   bool // exclusively
	after  []func()
	ignore []goleak.Option
}

// UsesServices is for a package whose tests use RabbitMQ or MariaDB and stop
// neither: Main holds the fault lock shared while they run, so that they
// wait while another package's tests have a service stopped.
func UsesServices() MainOption { return func(o *mainOptions) { o.lock = true } }

// StopsServices is for a package whose tests stop and restart RabbitMQ or
// MariaDB (Control): Main holds the fault lock exclusively while they run,
// so that no other package's tests use those services meanwhile.
func StopsServices() MainOption {
	return func(o *mainOptions) { o.lock, o.excl = true, true }
}

// AfterTests runs f once the tests have run, before the leak check: what a
// package set up once for all its tests (a shared database, a built
// binary) is undone there, and its goroutines are gone before the check.
func AfterTests(f func()) MainOption {
	return func(o *mainOptions) { o.after = append(o.after, f) }
}

// IgnoreGoroutine tells the leak check that a goroutine running fn, a
// library's own function named in full ("github.com/valyala/fasthttp.
// updateServerDate.func1"), outlives the tests by the library's design:
// such a goroutine, and no other, is not a leak. fn is matched anywhere on
// the goroutine's stack (goleak.IgnoreAnyFunction), since a library's
// goroutine usually waits below its own function, in time.Sleep or a
// channel receive, which would ignore every goroutine waiting there.
func IgnoreGoroutine(fn string) MainOption {
	return func(o *mainOptions) { o.ignore = append(o.ignore, goleak.IgnoreAnyFunction(fn)) }
}

// Main is the body of every test package's TestMain, which is then one
// line:
//
//	func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }
//
// It runs the tests (under the fault lock when the options say the package
// uses the services), then the AfterTests functions, removes the binary
// that Binary built, if any, then, when the tests passed, fails the
// package if a goroutine outlives them: every server, client,
// subscription and process a test starts must be stopped and waited for by
// its cleanup. It exits the process with the tests' code and
// does not return.
func Main(m *testing.M, opts ...MainOption) {
	var o mainOptions
	for _, opt := range opts {
		opt(&o)
	}
	os.Exit(runMain(m, o))
}

func runMain(m *testing.M, o mainOptions) int {
	code := 1
	func() {
		if o.lock {
			unlock, err := Lock(o.excl)
			if err != nil {
				fmt.Fprintln(os.Stderr, "tests:", err)
				return
			}
			defer unlock()
		}
		code = m.Run()
	}()
	for _, f := range o.after {
		f()
	}
	removeBinary()
	if code == 0 {
		if err := goleak.Find(o.ignore...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: a goroutine outlived the tests:", err)
			code = 1
		}
	}
	return code
}
