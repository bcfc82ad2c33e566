package httpapi

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

// The status page's files, built into the binary: no CDN, no build step.
// They hold no data; the page fetches it from the admin-guarded endpoints
// with the token the user types (or the browser's client certificate).
//
//go:embed ui/index.html ui/app.js ui/charts.js ui/style.css
var uiFiles embed.FS

// uiHeaders keep the page to its own origin's files and out of frames.
func uiHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// uiRedirect sends /ui to the page, whose files it names relative to /ui/.
func uiRedirect(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/ui/") }

// uiFile serves one of the page's files (GET /ui/, /ui/app.js, /ui/charts.js, /ui/style.css).
func uiFile(name string) gin.HandlerFunc {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.FileServer(http.FS(sub))
	return func(c *gin.Context) {
		uiHeaders(c)
		r := c.Request.Clone(c.Request.Context())
		r.URL.Path = name
		files.ServeHTTP(c.Writer, r)
	}
}
