package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"

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
		writeFailure(c, readFailure(err))
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
	t, err := a.cfg.Node.ReadPolicies(ctx, stale)
	if err != nil {
		writeFailure(c, readFailure(err))
		return nil, false
	}
	c.Header("Cache-Control", "no-store")
	c.Header("ETag", etag(t.Version))
	return t.Policies, true
}

// etag is a table version as an HTTP entity tag.
func etag(version string) string { return `"` + version + `"` }

// ifMatch reads the table version a whole-table write names: If-Match with
// one entity tag (quotes optional), or "*" for whatever the table is. ok is
// false once it has answered.
func ifMatch(c *gin.Context) (version string, ok bool) {
	h := strings.TrimSpace(c.GetHeader("If-Match"))
	switch {
	case h == "":
		writeProblem(c, http.StatusPreconditionRequired, CodePreconditionRequired,
			`PUT /v1/policies replaces the whole table: send If-Match with the ETag of the GET /v1/policies you computed it from (or If-Match: * to overwrite whatever the table holds)`)
		return "", false
	case h == cluster.AnyVersion:
		return h, true
	}
	v := strings.TrimSuffix(strings.TrimPrefix(h, `"`), `"`)
	if v == "" || strings.ContainsAny(v, `", `) || strings.HasPrefix(h, "W/") {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "If-Match: want one strong entity tag as GET /v1/policies answers in ETag, or *")
		return "", false
	}
	return v, true
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
	body, ok := readPolicyBody(c, MaxBodyPolicy)
	if !ok {
		return
	}
	p, err := policy.ParseOne(c.Param("name"), body)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return
	}
	if !a.scopeAllowed(c, []policy.Policy{p}) {
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

// replacePolicies is PUT /v1/policies: the whole table in one log entry.
// The body is a policy file's ({"policies": [...]}, JSON or YAML); every
// policy it does not list is deleted with its windows. An empty list is
// refused: it would leave no policy for any check to use. If-Match names
// the table version (GET's ETag) the body was computed from; the leader
// refuses a stale one with 409 table_changed, so a write never undoes a
// change it did not see.
func (a *API) replacePolicies(c *gin.Context) {
	body, ok := readPolicyBody(c, MaxBodyTable)
	if !ok {
		return
	}
	ps, err := policy.Parse(body)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return
	}
	if len(ps) == 0 {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "policies: the list is empty; replacing the table with it would delete every policy (DELETE /v1/policies/NAME deletes one)")
		return
	}
	version, ok := ifMatch(c)
	if !ok || !a.scopeAllowed(c, ps) {
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.ReplacePolicies(ctx, a.keepMirrored(ctx, ps), version)
	if err != nil {
		a.adminError(c, "replace the policy table", err)
		return
	}
	c.Header("ETag", etag(res.Version))
	c.JSON(http.StatusOK, res)
}

func (a *API) deletePolicy(c *gin.Context) {
	name := c.Param("name")
	if p, ok := a.cfg.Node.Policy(name); ok && p.Mirrored {
		writeProblem(c, http.StatusConflict, CodeGlobalPolicy, fmt.Sprintf("policy %q is the parent's global policy, mirrored here: delete it at the parent (%s); nothing changed", name, a.cfg.Parent))
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	if err := a.cfg.Node.DeletePolicy(ctx, name); err != nil {
		a.adminError(c, "delete policy "+name, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"deleted": name})
}

// resetKey is DELETE /v1/windows/:policy/:client: the key starts afresh.
func (a *API) resetKey(c *gin.Context) {
	pol, client, ok := keyParams(c)
	if !ok {
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	found, err := a.cfg.Node.ResetKey(ctx, pol, client)
	if err != nil {
		a.adminError(c, "reset "+pol+"/"+client, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"policy": pol, "client": client, "reset": found})
}

// readPolicyBody reads a policy body of at most limit bytes and applies
// the same text check as every JSON body: go-yaml, like encoding/json,
// turns invalid UTF-8 and a lone low surrogate into U+FFFD, which an Envoy
// domain or descriptor value would keep. ok is false once it has answered.
func readPolicyBody(c *gin.Context, limit int64) (body []byte, ok bool) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		bodyReadFailed(c, err)
		return nil, false
	}
	if err := checkJSONText(body); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return nil, false
	}
	return body, true
}

// keyParams reads a key's :policy and :client from the path. A name no
// policy can have is unknown, as on the check and status endpoints (left to
// the cluster it came back as a 500). ok is false once it has answered.
func keyParams(c *gin.Context) (pol, client string, ok bool) {
	pol, client = c.Param("policy"), c.Param("client")
	if err := cluster.ValidateClient(client); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, err.Error())
		return "", "", false
	}
	if err := policy.ValidateName(pol); err != nil {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, "policy "+err.Error())
		return "", "", false
	}
	return pol, client, true
}
