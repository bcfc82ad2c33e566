package fsm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// Hit is one request to count against (policy, client): Apply resolves the
// policy from the replicated table.
type Hit struct {
	Policy string
	Client string
	Cost   int64
}

// Validate checks what the decoder enforces, so a valid hit always encodes.
func (h Hit) Validate() error {
	if err := ValidateClient(h.Client); err != nil {
		return err
	}
	if err := validID("policy", h.Policy, MaxPolicyLen); err != nil {
		return err
	}
	return ValidateCost(h.Cost)
}

// ValidateCost checks a hit's cost: from 1 to one more than the largest
// limit (a cost no limit can allow is still a valid question).
func ValidateCost(cost int64) error {
	if cost < 1 || cost > MaxLimit+1 {
		return fmt.Errorf("cost %d out of range [1, %d]", cost, int64(MaxLimit+1))
	}
	return nil
}

// AppendHits encodes a version-2 hits entry stamped with the leader's now
// (Unix ms). groups gives the sizes of consecutive all-or-nothing groups and
// must add up to len(hits); nil makes every hit a group of one.
//
//	type, version 2, varint now, uvarint groups,
//	groups × (uvarint n, n × (policy, client, uvarint cost))
func AppendHits(dst []byte, now int64, hits []Hit, groups []int) []byte {
	dst = append(dst, EntryHits, hitsV2)
	dst = binary.AppendVarint(dst, now)
	if groups == nil {
		dst = binary.AppendUvarint(dst, uint64(len(hits)))
		for i := range hits {
			dst = binary.AppendUvarint(dst, 1)
			dst = appendHit(dst, &hits[i])
		}
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(groups)))
	at := 0
	for _, n := range groups {
		dst = binary.AppendUvarint(dst, uint64(n))
		for i := at; i < at+n; i++ {
			dst = appendHit(dst, &hits[i])
		}
		at += n
	}
	return dst
}

func appendHit(dst []byte, h *Hit) []byte {
	dst = appendString(dst, h.Policy)
	dst = appendString(dst, h.Client)
	return binary.AppendUvarint(dst, uint64(h.Cost))
}

// decodeHitsV2 decodes a version-2 hits entry into views appended to dst.
func decodeHitsV2(buf []byte, dst []hitView) (now int64, hits []hitView, err error) {
	d, err := headerV(buf, EntryHits, hitsV2)
	if err != nil {
		return 0, dst, err
	}
	now = d.varint("now")
	if d.err == nil && now <= 0 {
		d.fail("now %d is not a Unix time", now)
	}
	groups := d.uvarint("group count")
	if d.err == nil && (groups == 0 || groups > MaxHitsPerLog) {
		d.fail("group count %d out of range", groups)
	}
	total := uint64(0)
	for g := uint64(0); d.err == nil && g < groups; g++ {
		n := d.uvarint("group size")
		total += n
		if d.err == nil && (n == 0 || total > MaxHitsPerLog) {
			d.fail("group size %d out of range", n)
		}
		for i := uint64(0); d.err == nil && i < n; i++ {
			var h hitView
			h.policy = d.id("policy", MaxPolicyLen)
			h.client = d.id("client", MaxClientLen)
			h.cost = d.number("cost", MaxLimit+1)
			if i == 0 {
				h.group = int(n)
			}
			dst = append(dst, h)
		}
	}
	if err := d.end(); err != nil {
		return 0, dst[:0], err
	}
	return now, dst, nil
}

// DecodeHits decodes a version-2 hits entry into hits and group sizes; for
// tests and tools, since it copies every string.
func DecodeHits(buf []byte) (now int64, hits []Hit, groups []int, err error) {
	now, views, err := decodeHitsV2(buf, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	hits = make([]Hit, len(views))
	for i, v := range views {
		hits[i] = Hit{Policy: string(v.policy), Client: string(v.client), Cost: v.cost}
		if v.group > 0 {
			groups = append(groups, v.group)
		}
	}
	return now, hits, groups, nil
}

// SetMode says how a set-policies entry applies.
type SetMode byte

const (
	// SetUpsert adds or replaces each policy.
	SetUpsert SetMode = 1
	// SetSeed applies only to a table no policy entry has touched yet: the
	// first leader of a new cluster (or of one upgraded from the release
	// before policies) seeds it from its flags; later seeds are no-ops.
	SetSeed SetMode = 2
	// SetReplace makes the table exactly the entry's policies: each is
	// added or replaced as by SetUpsert, and every policy it does not
	// list is deleted as by a delete-policy entry, in one change.
	SetReplace SetMode = 3
)

// EncodeSetPolicies encodes an entry that adds or replaces policies.
//
//	type, version, mode, uvarint n, n × (name, algorithm byte,
//	uvarint limits, limits × (uvarint limit, uvarint windowMs, uvarint burst))
func EncodeSetPolicies(mode SetMode, ps []policy.Policy) []byte {
	b := []byte{EntrySetPolicies, codecVersion, byte(mode)}
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = appendPolicyBody(b, p)
	}
	return b
}

// hasEnvoy marks, in a policy body's algorithm byte, that the body ends
// with the policy's Envoy match as JSON. A policy without one encodes
// exactly as before the match existed, so older entries and snapshots read
// unchanged (and a node that predates it halts on the bit, as on any entry
// it cannot read).
const hasEnvoy = 0x80

// hasOptions marks, in the algorithm byte, that a uvarint of option bits
// follows the limits (before any Envoy match). Policies with default
// options encode exactly as before options existed.
const (
	hasOptions = 0x40

	optLeased     = 1 << 0 // Consistency "leased"
	optEpochAlign = 1 << 1 // Align "epoch"
	// optCalendar (Align "calendar") is followed by the zone name, a
	// string after the option bits ("" for UTC). It and optShadow are
	// format R4: PolicyFormat keeps them off the log until every voter
	// reads them, since an older node halts on an unknown bit.
	optCalendar = 1 << 2
	optShadow   = 1 << 3 // Mode "shadow"
	// optGlobal (Scope "global") and optMirrored (a region's copy) are
	// format R5 (slice_codec.go).
	optGlobal    = 1 << 4
	optMirrored  = 1 << 5
	knownOptions = optLeased | optEpochAlign | optCalendar | optShadow | optGlobal | optMirrored
)

func policyOptions(p policy.Policy) uint64 {
	var o uint64
	if p.IsLeased() {
		o |= optLeased
	}
	if p.EpochAligned() {
		o |= optEpochAlign
	}
	if p.CalendarAligned() {
		o |= optCalendar
	}
	if p.IsShadow() {
		o |= optShadow
	}
	return o | scopeOptions(p)
}

func appendPolicyBody(b []byte, p policy.Policy) []byte {
	b = appendString(b, p.Name)
	alg := byte(p.Alg())
	if p.Envoy != nil {
		alg |= hasEnvoy
	}
	opts := policyOptions(p)
	if opts != 0 {
		alg |= hasOptions
	}
	b = append(b, alg)
	b = binary.AppendUvarint(b, uint64(len(p.Limits)))
	for _, l := range p.Limits {
		b = binary.AppendUvarint(b, uint64(l.Limit))
		b = binary.AppendUvarint(b, uint64(l.Window.Milliseconds()))
		b = binary.AppendUvarint(b, uint64(l.Burst))
	}
	if opts != 0 {
		b = binary.AppendUvarint(b, opts)
	}
	if opts&optCalendar != 0 {
		b = appendString(b, p.Timezone)
	}
	if p.Envoy != nil {
		// Strings, bools and numbers only: Marshal cannot fail, and its
		// output is deterministic (the state digest hashes it).
		envoy, _ := json.Marshal(p.Envoy)
		b = appendString(b, string(envoy))
	}
	return b
}

func decodeSetPolicies(buf []byte) (SetMode, []policy.Policy, error) {
	d, err := header(buf, EntrySetPolicies)
	if err != nil {
		return 0, nil, err
	}
	mode := SetMode(d.byte("mode"))
	if d.err == nil && mode != SetUpsert && mode != SetSeed && mode != SetReplace {
		d.fail("mode %d unknown", mode)
	}
	n := d.uvarint("policy count")
	if d.err == nil && n > 1<<16 {
		d.fail("%d policies", n)
	}
	var ps []policy.Policy
	for i := uint64(0); d.err == nil && i < n; i++ {
		p, err := d.policy()
		if err != nil {
			d.fail("policy %d: %v", i, err)
		}
		ps = append(ps, p)
	}
	return mode, ps, d.end()
}

// policy decodes one policy and validates it with the same rules as the API.
func (d *decoder) policy() (policy.Policy, error) {
	p := policy.Policy{Name: string(d.bytes("policy name", MaxPolicyLen))}
	alg := d.byte("algorithm")
	p.Algorithm = window.Algorithm(alg &^ (hasEnvoy | hasOptions)).String()
	n := d.uvarint("limit count")
	if d.err == nil && n > policy.MaxLimits {
		d.fail("%d limits", n)
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		limit, ms, burst := d.uvarint("limit"), d.uvarint("windowMs"), d.uvarint("burst")
		if limit > MaxLimit || ms > MaxWindowMs || burst > MaxLimit {
			d.fail("limit %d out of range", i)
		}
		p.Limits = append(p.Limits, policy.Limit{Limit: int64(limit),
			Window: policy.Duration(time.Duration(ms) * time.Millisecond), Burst: int64(burst)})
	}
	if alg&hasOptions != 0 {
		opts := d.uvarint("policy options")
		if d.err == nil && (opts == 0 || opts&^knownOptions != 0) {
			d.fail("policy options %#x unknown to this node", opts)
		}
		if d.err == nil && opts&(optEpochAlign|optCalendar) == optEpochAlign|optCalendar {
			d.fail("policy options %#x: two alignments", opts)
		}
		if opts&optLeased != 0 {
			p.Consistency = policy.Leased
		}
		if opts&optEpochAlign != 0 {
			p.Align = policy.AlignEpoch
		}
		if opts&optCalendar != 0 {
			p.Align = policy.AlignCalendar
			p.Timezone = string(d.bytes("timezone", policy.MaxZoneLen))
		}
		if opts&optShadow != 0 {
			p.Mode = policy.Shadow
		}
		p.Scope, p.Mirrored = scopeOf(opts)
	}
	if alg&hasEnvoy != 0 {
		raw := d.bytes("envoy match", policy.MaxEnvoyJSON)
		if d.err == nil {
			p.Envoy = new(policy.Envoy)
			if err := json.Unmarshal(raw, p.Envoy); err != nil {
				d.fail("envoy match: %v", err)
			}
		}
	}
	if d.err != nil {
		return p, nil
	}
	return p, p.Validate()
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.buf) {
		d.fail("missing %s", what)
		return 0
	}
	d.off++
	return d.buf[d.off-1]
}

// EncodeDeletePolicy encodes an entry that deletes a policy and its windows.
func EncodeDeletePolicy(name string) []byte {
	return appendString([]byte{EntryDeletePolicy, codecVersion}, name)
}

func decodeDeletePolicy(buf []byte) (string, error) {
	d, err := header(buf, EntryDeletePolicy)
	if err != nil {
		return "", err
	}
	name := string(d.id("policy", MaxPolicyLen))
	return name, d.end()
}

// EncodeResetKey encodes an entry that forgets one key's state, as if it
// had never been seen.
func EncodeResetKey(policyName, client string) []byte {
	b := appendString([]byte{EntryResetKey, codecVersion}, policyName)
	return appendString(b, client)
}

func decodeResetKey(buf []byte) (policyName, client []byte, err error) {
	d, err := header(buf, EntryResetKey)
	if err != nil {
		return nil, nil, err
	}
	policyName = d.id("policy", MaxPolicyLen)
	client = d.id("client", MaxClientLen)
	return policyName, client, d.end()
}
