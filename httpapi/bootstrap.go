package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
)

// bootstrapInfo tells a bootstrapping peer who this node is.
func (a *API) bootstrapInfo(c *gin.Context) {
	c.JSON(http.StatusOK, a.cfg.Node.BootstrapInfo())
}

// acceptClaim records a bootstrap claim this node takes part in.
func (a *API) acceptClaim(c *gin.Context) {
	var claim cluster.BootstrapClaim
	if !bindJSON(c, &claim, false) {
		return
	}
	if err := a.cfg.Node.AcceptClaim(claim); err != nil {
		if errors.Is(err, cluster.ErrClaimRefused) {
			writeProblem(c, http.StatusConflict, CodeInvalidRequest, err.Error())
			return
		}
		writeProblem(c, http.StatusInternalServerError, CodeInternal, err.Error())
		return
	}
	c.JSON(http.StatusOK, gin.H{"accepted": claim.By})
}
