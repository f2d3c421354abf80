package admin

import (
	"context"
	"net/http"
	"time"
)

// Script is one Lua script a gateway has loaded into Redis, the set in use.
type Script struct {
	Name string `json:"name"`
	SHA  string `json:"sha"`
	// FolderSHA is the SHA-1 of the script's file in the gateway's scripts
	// folder when it differs from SHA: what a reload would load.
	FolderSHA string `json:"folder_sha,omitempty"`
	// FolderError is why that file cannot be read.
	FolderError string `json:"folder_error,omitempty"`
}

// Where the gateway's scripts folder stands against the set in use, as
// ScriptList.Folder says.
const (
	FolderNone       = "none"       // no folder: the built-in copies are in use
	FolderSame       = "same"       // the folder holds the set in use
	FolderDiffers    = "differs"    // a reload would load another script
	FolderUnreadable = "unreadable" // a reload would fail: a file cannot be read
)

// ScriptList is the answer of the script calls.
type ScriptList struct {
	Scripts []Script `json:"scripts"`
	// Folder is FolderNone, FolderSame, FolderDiffers or FolderUnreadable.
	Folder string `json:"folder"`
	// ReadAt is when the reload that made the set in use read it; nil
	// before the first.
	ReadAt *time.Time `json:"read_at"`
	// Raw is the answer as the gateway sent it, for printing.
	Raw []byte `json:"-"`
}

// Scripts lists the scripts the gateway has loaded (the set in use) and
// whether its scripts folder still holds them. It blocks for one call.
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
