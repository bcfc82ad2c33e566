package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// RegionPath is the region's operator view (admin-guarded, as
// /v1/cluster/members: client ids are personal data).
const RegionPath = "/v1/cluster/region"

// RegionViewer reports a region's slices and its parent's round trip
// (cmd/rlnode adapts region.Holder's StatusView). It must be cheap: the
// handler calls it once per request.
type RegionViewer interface {
	RegionStatus() RegionBody
}

// RegionKey is one global key's slices in the region, in units.
type RegionKey struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	// Held is what the region's live slices hold now; the rest are
	// running totals since the key's slice state was created: Got (the
	// parent lent), Spent (hits in the region spent), Returned
	// (withdrawn in the region's log to go back up) and Short (units of
	// hits that found no slice: refused 429 while the parent said the
	// window is spent, else waited for one and failed 503
	// parent_unreachable if none came).
	Held     int64 `json:"held"`
	Got      int64 `json:"got"`
	Spent    int64 `json:"spent"`
	Returned int64 `json:"returned"`
	Short    int64 `json:"short"`
}

// RegionParent is the region's holder at its parent, as the region's
// leader knows it.
type RegionParent struct {
	Addrs  string `json:"addrs"`
	Holder string `json:"holder"`
	// Up: a slice request succeeded within the last 3 s; RTTMs is the
	// last successful one's round trip; Calls and Failures count slice
	// requests; UnitsReturned, units given back.
	Up            bool    `json:"up"`
	RTTMs         float64 `json:"rttMs"`
	Calls         int64   `json:"calls"`
	Failures      int64   `json:"failures"`
	UnitsReturned int64   `json:"unitsReturned"`
}

// RegionBody is the answer of GET /v1/cluster/region.
type RegionBody struct {
	Region string `json:"region"`
	// Node is the answering node; Holder says it is the region's leader,
	// its one holder at the parent. Parent's figures are the holder's:
	// on a follower they are what it saw when it last led (zero if
	// never); ask LeaderID's node for the live ones.
	Node     string       `json:"node"`
	Holder   bool         `json:"holder"`
	LeaderID string       `json:"leaderId"`
	Parent   RegionParent `json:"parent"`
	// Keys are the global keys with slice state, most units spent
	// first, at most 100 of KeysTotal; StatsReadAtMs is when this node
	// read them from its state machine (Unix ms; the leader's holder
	// reads them every 20 ms, a follower at most once a second).
	Keys          []RegionKey `json:"keys"`
	KeysTotal     int         `json:"keysTotal"`
	StatsReadAtMs int64       `json:"statsReadAtMs"`
}

// region is GET /v1/cluster/region: this node's region, its holder at
// the parent, and per global key the slice units held, got, spent,
// returned and short. A node started without --region answers 404.
func (a *API) region(c *gin.Context) {
	if a.cfg.RegionView == nil {
		writeProblem(c, http.StatusNotFound, CodeNotFound, "this node is in no region (started without --region): it has no slices of a parent's global policies")
		return
	}
	body := a.cfg.RegionView.RegionStatus()
	body.Node = a.cfg.Node.ID()
	if body.Keys == nil {
		body.Keys = []RegionKey{}
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, body)
}
