// Package docmaps holds the test that keeps the repository's maps true:
// the rooms table of docs/development.md (who imports whom) and the rooms
// tables of the packages' DESIGN.md pages (which file owns what) are
// compared with the code on every `go test`, so a new import or a new file
// that the map does not show fails a test instead of misleading a reader.
//
// The package has no code of its own; it reads the source tree with
// go/build and go/parser (no `go list` subprocess, no network).
package docmaps
