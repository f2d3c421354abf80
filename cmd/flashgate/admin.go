package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/config"
)

const adminUsage = `usage: flashgate admin [--addr URL] [--token TOKEN] [--config FILE] COMMAND

commands:
  sale create ID --stock N [--limit N] [--starts TIME] [--ends TIME]
  sale update ID [--stock N] [--limit N] [--starts TIME | --clear-starts] [--ends TIME | --clear-ends]
  sale show ID
  sale restock ID N
  sale lock ID
  sale unlock ID
  scripts list
  scripts reload
  health [--url URL]

flags (before or after the command):
  --addr URL     admin listener (default: http:// + FLASHGATE_ADMIN_ADDR, 127.0.0.1:8081)
  --token TOKEN  bearer token (default: FLASHGATE_ADMIN_TOKEN)
  --config FILE  settings file to read admin.addr, admin.token, http.addr from (FLASHGATE_CONFIG)
  --url URL      health only: what to probe (default: http:// + FLASHGATE_HTTP_ADDR + /readyz)

TIME is RFC 3339 (2025-11-28T09:00:00Z). create refuses an existing sale and
update a missing one. The answer is printed as indented JSON. Exit status: 0
on a 2xx answer, 1 on any other answer or no answer, 2 on bad usage.`

// adminTimeout bounds one call to the admin API, answer included.
const adminTimeout = 10 * time.Second

// admin is one run of `flashgate admin`: its flags and the settings they
// fall back on.
type admin struct {
	addr, token, config, url string

	cfg    *config.Config // loaded on first need
	client *http.Client
	stdout io.Writer
}

// runAdmin talks to a gateway's admin API (and, for health, to its public
// /readyz) so that an operator needs no curl.
func runAdmin(ctx context.Context, args []string, stdout io.Writer) error {
	a := &admin{
		config: os.Getenv("FLASHGATE_CONFIG"),
		client: &http.Client{Timeout: adminTimeout},
		stdout: stdout,
	}
	err := a.run(ctx, args)
	if errors.Is(err, flag.ErrHelp) {
		_, err = fmt.Fprintln(stdout, adminUsage)
	}
	return err
}

func (a *admin) run(ctx context.Context, args []string) error {
	fs := a.flags("admin")
	if err := fs.Parse(args); err != nil {
		return adminUsageError(err)
	}
	args = fs.Args()
	if len(args) == 0 {
		return adminUsageError(errors.New("no command"))
	}
	switch args[0] {
	case "sale":
		if len(args) < 2 {
			return adminUsageError(errors.New("sale needs a command: create, update, show, restock, lock or unlock"))
		}
		switch args[1] {
		case "create":
			return a.saleUpsert(ctx, args[2:], true)
		case "update":
			return a.saleUpsert(ctx, args[2:], false)
		case "show":
			return a.saleSimple(ctx, "sale show", args[2:], http.MethodGet, "")
		case "lock", "unlock":
			return a.saleSimple(ctx, "sale "+args[1], args[2:], http.MethodPost, "/"+args[1])
		case "restock":
			return a.saleRestock(ctx, args[2:])
		}
		return adminUsageError(fmt.Errorf("unknown command sale %q", args[1]))
	case "scripts":
		if len(args) < 2 {
			return adminUsageError(errors.New("scripts needs a command: list or reload"))
		}
		switch args[1] {
		case "list":
			return a.scripts(ctx, "scripts list", args[2:], http.MethodGet, "/admin/v1/scripts")
		case "reload":
			return a.scripts(ctx, "scripts reload", args[2:], http.MethodPost, "/admin/v1/scripts/reload")
		}
		return adminUsageError(fmt.Errorf("unknown command scripts %q", args[1]))
	case "health":
		return a.health(ctx, args[1:])
	}
	return adminUsageError(fmt.Errorf("unknown command %q", args[0]))
}

// flags returns a flag set holding the flags every command accepts, so that
// they may come after the command too.
func (a *admin) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("flashgate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.addr, "addr", a.addr, "")
	fs.StringVar(&a.token, "token", a.token, "")
	fs.StringVar(&a.config, "config", a.config, "")
	return fs
}

func adminUsageError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v\n\n%s", errUsage, err, adminUsage)
}

// parseAdminArgs parses args, flags and positional arguments in any order,
// and returns the positional ones, checking that there are want of them.
func parseAdminArgs(fs *flag.FlagSet, args []string, want int, what string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, adminUsageError(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) != want {
		return nil, adminUsageError(fmt.Errorf("%s: want %s", strings.TrimPrefix(fs.Name(), "flashgate "), what))
	}
	return pos, nil
}

// settings loads the settings as a gateway on this machine would read them
// (file, then environment), with --token standing for FLASHGATE_ADMIN_TOKEN.
func (a *admin) settings() (*config.Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	getenv := os.Getenv
	if a.token != "" {
		getenv = func(k string) string {
			if k == "FLASHGATE_ADMIN_TOKEN" {
				return a.token
			}
			return os.Getenv(k)
		}
	}
	cfg, err := config.Load(a.config, getenv)
	if err != nil {
		return nil, err
	}
	a.cfg = cfg
	return cfg, nil
}

// base returns the admin API's base URL: --addr, else the admin listener of
// the settings.
func (a *admin) base() (string, error) {
	if a.addr != "" {
		return adminBaseURL("--addr", a.addr)
	}
	cfg, err := a.settings()
	if err != nil {
		return "", err
	}
	return listenerURL(cfg.Admin.Addr), nil
}

func (a *admin) bearer() (string, error) {
	if a.token != "" {
		return a.token, nil
	}
	cfg, err := a.settings()
	if err != nil {
		return "", err
	}
	return cfg.Admin.Token, nil
}

// adminBaseURL accepts http(s)://host[:port][/prefix] or a bare host:port.
func adminBaseURL(flagName, raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return "", adminUsageError(fmt.Errorf("%s %q: want http://host:port", flagName, raw))
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// listenerURL turns a listener's address into a URL to reach it from the same
// host: a listener on every interface is reached on loopback.
func listenerURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func salePath(id string) string { return "/admin/v1/sales/" + url.PathEscape(id) }

// saleUpsert is `sale create` and `sale update`: one PUT of the fields given.
// The admin API's PUT creates or updates; the CLI asks first, so that a typo
// in an id does not create a sale and create does not overwrite one. (Two
// operators racing can still both pass the check: the PUT is what counts.)
func (a *admin) saleUpsert(ctx context.Context, args []string, create bool) error {
	name := "sale update"
	if create {
		name = "sale create"
	}
	fs := a.flags(name)
	stock := fs.String("stock", "", "")
	limit := fs.String("limit", "", "")
	starts := fs.String("starts", "", "")
	ends := fs.String("ends", "", "")
	var clearStarts, clearEnds *bool
	if !create {
		clearStarts = fs.Bool("clear-starts", false, "")
		clearEnds = fs.Bool("clear-ends", false, "")
	}
	pos, err := parseAdminArgs(fs, args, 1, "one sale id")
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	body := map[string]any{}
	for _, f := range []struct {
		flag, field string
		v           *string
		min         int64
	}{{"stock", "stock", stock, 0}, {"limit", "per_user_limit", limit, 1}} {
		if !set[f.flag] {
			continue
		}
		n, err := strconv.ParseInt(*f.v, 10, 64)
		if err != nil || n < f.min {
			return adminUsageError(fmt.Errorf("%s: --%s %q: want a whole number from %d", name, f.flag, *f.v, f.min))
		}
		body[f.field] = n
	}
	if create && !set["stock"] {
		return adminUsageError(errors.New("sale create: --stock is required"))
	}
	for _, f := range []struct {
		flag, field string
		v           *string
		clear       *bool
	}{{"starts", "starts_at", starts, clearStarts}, {"ends", "ends_at", ends, clearEnds}} {
		if f.clear != nil && *f.clear {
			if set[f.flag] {
				return adminUsageError(fmt.Errorf("%s: --%s and --clear-%s together", name, f.flag, f.flag))
			}
			body[f.field] = nil // JSON null: an open window on that side
			continue
		}
		if !set[f.flag] {
			continue
		}
		if _, err := time.Parse(time.RFC3339, *f.v); err != nil {
			return adminUsageError(fmt.Errorf("%s: --%s %q: want an RFC 3339 time such as 2025-11-28T09:00:00Z", name, f.flag, *f.v))
		}
		body[f.field] = *f.v
	}
	if len(body) == 0 {
		return adminUsageError(errors.New("sale update: nothing to change (--stock, --limit, --starts, --ends, --clear-starts, --clear-ends)"))
	}

	id := pos[0]
	_, err = a.call(ctx, http.MethodGet, salePath(id), nil)
	var ae *apiError
	switch {
	case err == nil && create:
		return fmt.Errorf("sale %q already exists: use sale update", id)
	case errors.As(err, &ae) && ae.code == http.StatusNotFound && !create:
		return fmt.Errorf("no sale %q: use sale create", id)
	case err != nil && !(errors.As(err, &ae) && ae.code == http.StatusNotFound):
		return err
	}
	return a.print(a.call(ctx, http.MethodPut, salePath(id), body))
}

// saleSimple is a command that takes a sale id and nothing else.
func (a *admin) saleSimple(ctx context.Context, name string, args []string, method, action string) error {
	pos, err := parseAdminArgs(a.flags(name), args, 1, "one sale id")
	if err != nil {
		return err
	}
	return a.print(a.call(ctx, method, salePath(pos[0])+action, nil))
}

func (a *admin) saleRestock(ctx context.Context, args []string) error {
	pos, err := parseAdminArgs(a.flags("sale restock"), args, 2, "a sale id and a quantity")
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || n < 1 {
		return adminUsageError(fmt.Errorf("sale restock: quantity %q: want a whole number from 1", pos[1]))
	}
	return a.print(a.call(ctx, http.MethodPost, salePath(pos[0])+"/restock", map[string]any{"quantity": n}))
}

func (a *admin) scripts(ctx context.Context, name string, args []string, method, path string) error {
	if _, err := parseAdminArgs(a.flags(name), args, 0, "no arguments"); err != nil {
		return err
	}
	return a.print(a.call(ctx, method, path, nil))
}

// health probes a gateway's public /readyz: exit 0 when ready, 1 otherwise.
// It is the container healthcheck of the distroless image, which has no
// shell and no curl.
func (a *admin) health(ctx context.Context, args []string) error {
	fs := a.flags("health")
	fs.StringVar(&a.url, "url", a.url, "")
	if _, err := parseAdminArgs(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	target := a.url
	if target != "" {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return adminUsageError(fmt.Errorf("--url %q: want http://host:port/path", target))
		}
	} else {
		cfg, err := a.settings()
		if err != nil {
			return err
		}
		target = listenerURL(cfg.HTTP.Addr) + "/readyz"
	}
	return a.print(a.do(ctx, http.MethodGet, target, "", nil))
}

// apiError is a non-2xx answer.
type apiError struct {
	method, url string
	code        int
	status, msg string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.method, e.url, e.code, http.StatusText(e.code))
	if e.status != "" {
		s += ": " + e.status
	}
	if e.msg != "" {
		s += ": " + e.msg
	}
	if e.code == http.StatusUnauthorized {
		s += " (check --token or FLASHGATE_ADMIN_TOKEN)"
	}
	return s
}

// call sends one request to the admin API, with the token.
func (a *admin) call(ctx context.Context, method, path string, body any) ([]byte, error) {
	base, err := a.base()
	if err != nil {
		return nil, err
	}
	token, err := a.bearer()
	if err != nil {
		return nil, err
	}
	return a.do(ctx, method, base+path, token, body)
}

// do sends one request and returns the body of a 2xx answer, or an
// *apiError naming the answer's code and its status and error fields.
func (a *admin) do(ctx context.Context, method, target, token string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "flashgate-admin/"+version)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{method: method, url: target, code: resp.StatusCode}
		var fields struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(out, &fields) == nil {
			e.status, e.msg = fields.Status, fields.Error
		}
		return nil, e
	}
	return out, nil
}

// print writes an answer indented, or as it came when it is not JSON.
func (a *admin) print(body []byte, err error) error {
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if json.Indent(&buf, bytes.TrimSpace(body), "", "  ") != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(body))
	}
	buf.WriteByte('\n')
	_, err = a.stdout.Write(buf.Bytes())
	return err
}
