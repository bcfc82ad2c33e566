package httpapi

// The public routes that take a path argument or that the command line
// calls; they live here alone (the cluster serves only its node-to-node
// endpoints under cluster.InternalPrefix).
const (
	PeekPath     = "/v1/status/"
	PoliciesPath = "/v1/policies"
	WindowsPath  = "/v1/windows"
	JoinPath     = "/v1/cluster/join"
	RemovePath   = "/v1/cluster/remove"
	TransferPath = "/v1/cluster/transfer-leadership"
	BackupPath   = "/v1/cluster/backup"
	RestorePath  = "/v1/cluster/restore"
)
