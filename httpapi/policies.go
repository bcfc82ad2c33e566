package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
)

// peekDefault is GET /v1/status/:client: the default policy.
func (a *API) peekDefault(c *gin.Context) { a.peek(c, a.cfg.Policy, c.Param("a")) }

// peekNamed is GET /v1/status/:policy/:client.
func (a *API) peekNamed(c *gin.Context) { a.peek(c, c.Param("a"), c.Param("b")) }

func (a *API) peek(c *gin.Context, policyName, client string) {
	if err := cluster.ValidateClient(client); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, err.Error())
		return
	}
	if err := policy.ValidateName(policyName); err != nil {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, "policy "+err.Error())
		return
	}
	stale := c.Query("stale") == "true" || c.Query("stale") == "1"
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.Peek(ctx, policyName, client, stale)
	if err != nil {
		if errors.Is(err, cluster.ErrUnknownPolicy) {
			unknownPolicy(c, policyName)
			return
		}
		code := CodeNotLeader
		if errors.Is(err, cluster.ErrNoLeader) {
			code = CodeNoLeader
		}
		writeProblem(c, http.StatusServiceUnavailable, code, "linearizable read failed: "+firstLine(err))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Header(cluster.HeaderServedBy, res.ServedBy)
	c.JSON(http.StatusOK, res)
}

// readPolicies reads the table linearizably (?stale=true: this node's).
func (a *API) readPolicies(c *gin.Context) ([]policy.Policy, bool) {
	stale := c.Query("stale") == "true" || c.Query("stale") == "1"
	ctx, cancel := a.requestContext(c)
	defer cancel()
	ps, err := a.cfg.Node.ReadPolicies(ctx, stale)
	if err != nil {
		code := CodeNotLeader
		if errors.Is(err, cluster.ErrNoLeader) {
			code = CodeNoLeader
		}
		writeProblem(c, http.StatusServiceUnavailable, code, "linearizable read failed: "+firstLine(err))
		return nil, false
	}
	c.Header("Cache-Control", "no-store")
	return ps, true
}

func (a *API) listPolicies(c *gin.Context) {
	if ps, ok := a.readPolicies(c); ok {
		c.JSON(http.StatusOK, gin.H{"policies": ps})
	}
}

func (a *API) getPolicy(c *gin.Context) {
	ps, ok := a.readPolicies(c)
	if !ok {
		return
	}
	for _, p := range ps {
		if p.Name == c.Param("name") {
			c.JSON(http.StatusOK, p)
			return
		}
	}
	unknownPolicy(c, c.Param("name"))
}

// putPolicy is PUT /v1/policies/:name: add or replace, idempotent. The body
// is {"algorithm", "limits": [{"limit", "window", "burst"}]} ("name" may be
// given and must match the URL). It is validated here, so a bad policy is a
// 400 naming the field and writes nothing to the log.
func (a *API) putPolicy(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 1<<20)
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		writeProblem(c, http.StatusRequestEntityTooLarge, CodeInvalidRequest, "request body too large or unreadable: "+err.Error())
		return
	}
	// The same text check as every JSON body: go-yaml, like encoding/json,
	// turns invalid UTF-8 and a lone low surrogate into U+FFFD, which an
	// Envoy domain or descriptor value would keep.
	if err := checkJSONText(body); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return
	}
	p, err := policy.ParseOne(c.Param("name"), body)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.SetPolicy(ctx, p)
	if err != nil {
		a.adminError(c, "set policy "+p.Name, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"result": res, "policy": p})
}

func (a *API) deletePolicy(c *gin.Context) {
	name := c.Param("name")
	ctx, cancel := a.requestContext(c)
	defer cancel()
	if err := a.cfg.Node.DeletePolicy(ctx, name); err != nil {
		if errors.Is(err, cluster.ErrUnknownPolicy) {
			unknownPolicy(c, name)
			return
		}
		a.adminError(c, "delete policy "+name, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"deleted": name})
}

// resetKey is DELETE /v1/windows/:policy/:client: the key starts afresh.
func (a *API) resetKey(c *gin.Context) {
	pol, client := c.Param("policy"), c.Param("client")
	if err := cluster.ValidateClient(client); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, err.Error())
		return
	}
	// A name no policy can have is unknown, as on the check and status
	// endpoints; left to the cluster it came back as a 500.
	if err := policy.ValidateName(pol); err != nil {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, "policy "+err.Error())
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	found, err := a.cfg.Node.ResetKey(ctx, pol, client)
	if err != nil {
		if errors.Is(err, cluster.ErrUnknownPolicy) {
			unknownPolicy(c, pol)
			return
		}
		a.adminError(c, "reset "+pol+"/"+client, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"policy": pol, "client": client, "reset": found})
}
