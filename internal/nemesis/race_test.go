//go:build race

package nemesis

// raceEnabled says the tests run with the race detector; the binary the
// run starts is then built with it too, so that its races show.
const raceEnabled = true
