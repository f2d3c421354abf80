package admin

import (
	"context"
	"net/http"
)

// Script is one Lua script a gateway has loaded into Redis.
type Script struct {
	Name string `json:"name"`
	SHA  string `json:"sha"`
}

// ScriptList is the answer of the script calls.
type ScriptList struct {
	Scripts []Script `json:"scripts"`
	// Raw is the answer as the gateway sent it, for printing.
	Raw []byte `json:"-"`
}

// Scripts lists the scripts the gateway has loaded. It blocks for one call.
func (c *Client) Scripts(ctx context.Context) (*ScriptList, error) {
	return c.scripts(ctx, http.MethodGet, "/admin/v1/scripts")
}

// ReloadScripts makes the gateway load its scripts again (from its scripts
// directory, or the embedded set) and returns the new list. It blocks for
// one call; scripts that do not compile are an *APIError with Code 422 and
// Status "script_error", and the previous set stays.
func (c *Client) ReloadScripts(ctx context.Context) (*ScriptList, error) {
	return c.scripts(ctx, http.MethodPost, "/admin/v1/scripts/reload")
}

func (c *Client) scripts(ctx context.Context, method, path string) (*ScriptList, error) {
	var l ScriptList
	_, raw, err := c.call(ctx, method, path, nil, &l)
	if err != nil {
		return nil, err
	}
	l.Raw = raw
	return &l, nil
}
