package deploy

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// ../Dockerfile: its stages held against go.mod and config/, and its build
// step run as a plain `go build`.

func loadDockerfile(t *testing.T) []instruction {
	t.Helper()
	ins, err := parseDockerfile(readFile(t, "../Dockerfile"))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return ins
}

func TestDockerfileStages(t *testing.T) {
	ins := loadDockerfile(t)
	args := map[string]string{}
	var froms []string
	var final []instruction // the instructions of the last stage
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			if len(froms) == 0 { // global ARGs: usable in FROM
				for _, a := range strings.Fields(in.rest) {
					k, v, _ := strings.Cut(a, "=")
					args[k] = v
				}
			}
		case "FROM":
			f := strings.Fields(in.rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			img, err := shellWords(f[0], args)
			if err != nil {
				t.Fatalf("FROM %s: %v", in.rest, err)
			}
			froms = append(froms, img[0])
			final = nil
		default:
			final = append(final, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM %v: want a build stage and a final stage", froms)
	}

	// The build image's Go is the go line of go.mod.
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?\s*$`).FindStringSubmatch(readFile(t, "../go.mod"))
	if m == nil {
		t.Fatal("go.mod: no go line")
	}
	if want := "golang:" + m[1]; froms[0] != want && !strings.HasPrefix(froms[0], want+".") && !strings.HasPrefix(froms[0], want+"-") {
		t.Errorf("build stage FROM %s, want %s (go.mod says go %s%s)", froms[0], want, m[1], m[2])
	}

	if last := froms[len(froms)-1]; last != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot", last)
	}
	want := map[string]string{
		"COPY":       "--from=build /out/flashgate /flashgate",
		"USER":       "nonroot",
		"ENTRYPOINT": `["/flashgate"]`,
		"CMD":        `["gateway"]`,
		"EXPOSE":     port(t, config.Default().HTTP.Addr) + " " + port(t, config.Default().Admin.Addr),
	}
	for _, in := range final {
		if w, ok := want[in.cmd]; ok {
			if in.rest != w {
				t.Errorf("final stage: %s %s, want %s %s", in.cmd, in.rest, in.cmd, w)
			}
			delete(want, in.cmd)
		}
		if in.cmd == "HEALTHCHECK" {
			t.Errorf("final stage: HEALTHCHECK applies to every subcommand; set it per service in compose.yaml")
		}
	}
	for cmd, w := range want {
		t.Errorf("final stage: no %s %s", cmd, w)
	}
}

// dockerBuild returns the environment and the arguments of the Dockerfile's
// `go build`, its variables expanded to test values.
func dockerBuild(t *testing.T, vars map[string]string) (env, argv []string) {
	t.Helper()
	for _, in := range loadDockerfile(t) {
		if in.cmd != "RUN" || !strings.Contains(in.rest, "go build") {
			continue
		}
		w, err := shellWords(in.rest, vars)
		if err != nil {
			t.Fatalf("RUN %s: %v", in.rest, err)
		}
		for len(w) > 0 && strings.HasPrefix(w[0], "--") { // --mount=...
			w = w[1:]
		}
		for len(w) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(w[0]) {
			env, w = append(env, w[0]), w[1:]
		}
		if len(w) < 2 || w[0] != "go" || w[1] != "build" {
			t.Fatalf("RUN %s: want [VAR=value ...] go build ...", in.rest)
		}
		return env, w
	}
	t.Fatal("Dockerfile: no RUN ... go build")
	return nil, nil
}

// buildDockerfile runs the Dockerfile's `go build`, flags and environment
// as they are, from the repository root, into a temporary folder, and
// returns the binary's path.
func buildDockerfile(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	vars := map[string]string{
		"VERSION": "v0.0.0-dockertest", "COMMIT": "c0ffee",
		"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
	}
	env, argv := dockerBuild(t, vars)
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("build environment %v: want CGO_ENABLED=0 (a static binary for distroless/static)", env)
	}
	if !slices.Contains(argv, "-trimpath") {
		t.Errorf("go build %v: want -trimpath", argv)
	}
	i := slices.Index(argv, "-ldflags")
	if i < 0 || !strings.HasPrefix(argv[i+1], "-s -w ") ||
		!strings.Contains(argv[i+1], "-X main.version="+vars["VERSION"]) || !strings.Contains(argv[i+1], "-X main.commit="+vars["COMMIT"]) {
		t.Errorf("go build %v: want -ldflags \"-s -w -X main.version=$VERSION -X main.commit=$COMMIT\"", argv)
	}
	o := slices.Index(argv, "-o")
	if o < 0 || argv[o+1] != "/out/flashgate" || argv[len(argv)-1] != "./cmd/flashgate" {
		t.Fatalf("go build %v: want -o /out/flashgate ./cmd/flashgate (the final stage copies it)", argv)
	}
	bin := filepath.Join(t.TempDir(), "flashgate")
	argv[o+1] = bin

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", argv[1:]...)
	cmd.Dir = ".."
	// The build context has no .git (.dockerignore), so the image's build
	// stamps no VCS information: neither does this one.
	cmd.Env = append(append(os.Environ(), env...), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(argv[1:], " "), err, out)
	}
	return bin
}

// TestDockerBuild runs the image's build step as a plain go build and checks
// the binary: stamped with the version, static (distroless/static has no C
// library and no dynamic loader), stripped.
func TestDockerBuild(t *testing.T) {
	bin := buildDockerfile(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("flashgate version: %v\n%s", err, out)
	}
	if want := "flashgate v0.0.0-dockertest (commit c0ffee,"; !strings.HasPrefix(string(out), want) {
		t.Errorf("flashgate version = %q, want it to start with %q", out, want)
	}

	if runtime.GOOS != "linux" {
		t.Skip("the ELF checks need a linux build")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Errorf("the binary asks for a dynamic loader (PT_INTERP): not static")
		case elf.PT_DYNAMIC:
			t.Errorf("the binary has a dynamic section (PT_DYNAMIC): not static")
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("the binary has a symbol table: -ldflags -s did not apply")
	}
}
