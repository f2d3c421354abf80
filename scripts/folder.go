package scripts

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Where the folder stands against the set in use, as Comparison.Folder says.
const (
	// FolderNone: no folder is configured; the set in use is the built-in
	// copies, which cannot change.
	FolderNone = "none"
	// FolderSame: every file of the folder holds the script in use.
	FolderSame = "same"
	// FolderDiffers: a file holds another script than the one in use (or
	// no set is in use yet); a reload would load it, if it compiles.
	FolderDiffers = "differs"
	// FolderUnreadable: a file cannot be read (deleted, say); a reload
	// would fail and keep the set in use.
	FolderUnreadable = "unreadable"
)

// Comparison is the set in use beside the folder a reload would read.
type Comparison struct {
	// Scripts is the set in use, sorted by name, each beside its file;
	// empty before the first Load.
	Scripts []Compared
	// ReadAt is when the Load that made the set in use read it from the
	// folder or the built-in copies (a NOSCRIPT, which loads the set again
	// from memory, leaves it); zero before the first Load.
	ReadAt time.Time
	// Folder is FolderNone, FolderSame, FolderDiffers or FolderUnreadable;
	// a file that cannot be read wins over one that differs.
	Folder string
}

// Compared is one script of the set in use beside its file in the folder.
type Compared struct {
	Script
	// FolderSHA is the SHA-1 of the file when it differs from SHA; empty
	// when it is the same, cannot be read, or no folder is configured.
	FolderSHA string
	// FolderErr is why the file cannot be read; nil when it can.
	FolderErr error
}

// Compare reads the folder a reload would read and returns the set in use
// beside it. It reads the files only: it asks nothing of Redis, so a file
// that differs may still not compile. It blocks for the reads and is safe
// for concurrent use.
func (l *Loader) Compare() Comparison {
	s := l.cur.Load()
	c := Comparison{Folder: FolderNone}
	if s != nil {
		c.ReadAt = s.readAt
		c.Scripts = make([]Compared, len(s.list))
		for i, sc := range s.list {
			c.Scripts[i] = Compared{Script: sc}
		}
	}
	if l.dir == "" {
		return c
	}
	c.Folder = FolderSame
	if s == nil {
		c.Folder = FolderDiffers
		for _, name := range names {
			if _, err := l.read(name); err != nil {
				c.Folder = FolderUnreadable
			}
		}
		return c
	}
	for i := range c.Scripts {
		sc := &c.Scripts[i]
		src, err := l.read(sc.Name)
		if err != nil {
			sc.FolderErr = err
			c.Folder = FolderUnreadable
			continue
		}
		// The SHA-1 Redis names the script by, as loadSet checks it.
		if sha := redis.NewScript(src).Hash(); sha != sc.SHA {
			sc.FolderSHA = sha
			if c.Folder == FolderSame {
				c.Folder = FolderDiffers
			}
		}
	}
	return c
}
