//go:build race

package localstack

// Race says this binary was built with the race detector: the flashgate
// binary that Binary builds for its tests is then built with it too, so
// that races in those processes show.
const Race = true
