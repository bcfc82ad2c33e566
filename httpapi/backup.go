package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
)

// backup streams a consistent snapshot of the state from the leader (a
// follower streams it through). An
// error after the first byte aborts the connection, so a client never
// mistakes a cut stream for a whole backup (the format ends in a CRC too).
func (a *API) backup(c *gin.Context) {
	noDeadlines(c)
	ctx := c.Request.Context()
	w := &lazyHeader{c: c}
	if err := a.cfg.Backups.Backup(ctx, w); err != nil {
		if w.started {
			a.cfg.Logger.Error("backup stream failed", "error", err)
			panic(http.ErrAbortHandler)
		}
		a.adminError(c, "backup", err)
	}
}

// lazyHeader sets the success headers on the first write only.
type lazyHeader struct {
	c       *gin.Context
	started bool
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.c.Header("Content-Type", "application/octet-stream")
		l.c.Header("Content-Disposition", `attachment; filename="rlnode-backup.bin"`)
		l.c.Status(http.StatusOK)
	}
	return l.c.Writer.Write(p)
}

// restore replaces a new cluster's state with a backup (the request body).
func (a *API) restore(c *gin.Context) {
	if c.Request.ContentLength <= 0 {
		writeProblem(c, http.StatusLengthRequired, CodeInvalidRequest, "restore: send the backup file as the body, with Content-Length")
		return
	}
	noDeadlines(c)
	force := c.Query("force") == "true"
	res, err := a.cfg.Backups.RestoreBackup(c.Request.Context(), c.Request.Body, c.Request.ContentLength, force)
	if err != nil {
		if errors.Is(err, cluster.ErrNotEmpty) {
			writeProblem(c, http.StatusConflict, CodeInvalidRequest, detailOf(err))
			return
		}
		if errors.Is(err, cluster.ErrInvalidBackup) {
			writeProblem(c, http.StatusBadRequest, CodeInvalidBackup, detailOf(err))
			return
		}
		a.adminError(c, "restore", err)
		return
	}
	c.Header(cluster.HeaderServedBy, res.ServedBy)
	c.JSON(http.StatusOK, gin.H{"restored": true, "liveWindows": res.LiveWindows, "digest": res.Digest, "servedBy": res.ServedBy, "at": time.Now().UTC()})
}

// noDeadlines lifts the server's read and write timeouts for a transfer
// whose length depends on the state's size.
func noDeadlines(c *gin.Context) {
	rc := http.NewResponseController(c.Writer)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}
