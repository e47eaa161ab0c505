package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// GenAI and general semantic-convention keys, from the semconv release that
// still carries the gen_ai.* attributes.
const (
	keyOperationName    = semconv.GenAIOperationNameKey
	keyProviderName     = semconv.GenAIProviderNameKey
	keyRequestModel     = semconv.GenAIRequestModelKey
	keyResponseModel    = semconv.GenAIResponseModelKey
	keyFinishReasons    = semconv.GenAIResponseFinishReasonsKey
	keyInputTokens      = semconv.GenAIUsageInputTokensKey
	keyOutputTokens     = semconv.GenAIUsageOutputTokensKey
	keyCacheReadTokens  = semconv.GenAIUsageCacheReadInputTokensKey
	keyCacheWriteTokens = semconv.GenAIUsageCacheCreationInputTokensKey
	keyTokenType        = semconv.GenAITokenTypeKey
	keyErrorType        = semconv.ErrorTypeKey
	keyServerAddress    = semconv.ServerAddressKey
	keyHTTPStatus       = semconv.HTTPResponseStatusCodeKey
)

// Gatekeeper's own span attributes.
const (
	keyTrajectory = attribute.Key("gatekeeper.trajectory.id")
	keyParent     = attribute.Key("gatekeeper.trajectory.parent_id")
	keyTenant     = attribute.Key("gatekeeper.tenant")
	keyAPI        = attribute.Key("gatekeeper.api")
	keyStage      = attribute.Key("gatekeeper.stage")
	keyStop       = attribute.Key("gatekeeper.stop")
	keyDollars    = attribute.Key("gatekeeper.cost.dollars")
	keyEstimated  = attribute.Key("gatekeeper.cost.estimated")
	keyApprovalID = attribute.Key("gatekeeper.approval.id")
)

// Metric label keys. They are short, Prometheus-style names for gatekeeper's
// own metrics; the gen_ai.client.* metrics use the convention's keys above.
const (
	labelTenant   = attribute.Key("tenant")
	labelProvider = attribute.Key("provider")
	labelModel    = attribute.Key("model")
	labelStop     = attribute.Key("stop")
	labelType     = attribute.Key("type")
	labelState    = attribute.Key("state")
	labelFrom     = attribute.Key("from")
	labelTo       = attribute.Key("to")
	labelGate     = attribute.Key("gate")
	labelOutcome  = attribute.Key("outcome")
	labelResult   = attribute.Key("result")
	labelClass    = attribute.Key("class")
	labelReason   = attribute.Key("reason")
	labelPerson   = attribute.Key("person")
	labelGroup    = attribute.Key("group")
)

// Values of the operation and of the token types.
const (
	operationChat   = "chat"
	tokenInput      = "input"
	tokenCached     = "cached_input"
	tokenCacheWrite = "cache_write"
	tokenOutput     = "output"
)
