package scripts

// CompileError is how Redis begins its answer to a script it cannot
// compile, for the tests of package scripts_test.
const CompileError = compileError

// Asked reports, and takes, a pending ask of Stale for a hold pass.
func (l *Loader) Asked() bool {
	select {
	case <-l.kick:
		return true
	default:
		return false
	}
}
