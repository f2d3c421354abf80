package scripts

// CompileError is how Redis begins its answer to a script it cannot
// compile, for the tests of package scripts_test.
const CompileError = compileError
