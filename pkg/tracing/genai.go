package tracing

import (
	"context"
	"errors"
	"iter"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
)

// Attribute keys of the OpenTelemetry GenAI semantic conventions that agentbus sets (spelled
// out rather than imported from a semconv package, whose version moves with the SDK while
// these names are what backends key their GenAI views on).
const (
	GenAIOperationName     = attribute.Key("gen_ai.operation.name")
	GenAIProviderName      = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel      = attribute.Key("gen_ai.request.model")
	GenAIResponseModel     = attribute.Key("gen_ai.response.model")
	GenAIFinishReasons     = attribute.Key("gen_ai.response.finish_reasons")
	GenAIUsageInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	GenAIToolName          = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID        = attribute.Key("gen_ai.tool.call.id")
	ErrorType              = attribute.Key("error.type")

	// agentbus's own: the ai.providers alias of a model call, the session and turn. Every
	// attribute costs allocations per span in the SDK and the exporter, so spans carry the
	// conventions' required ones and these few.
	AgentbusProvider = attribute.Key("agentbus.provider")
	AgentbusSession  = attribute.Key("agentbus.session")
	AgentbusTurn     = attribute.Key("agentbus.turn")
)

// providerName maps an API value to the gen_ai.provider.name the conventions define; an API
// without one is reported as itself.
func providerName(api string) string {
	switch api {
	case llm.APIOpenAICompletions, llm.APIOpenAIResponses:
		return "openai"
	case llm.APIAnthropicMessages:
		return "anthropic"
	case llm.APIGoogleGenerative:
		return "gcp.gemini"
	case llm.APIOllamaChat:
		return "ollama"
	}
	return api
}

// StreamFunc is the shape of llm.Stream and loop.StreamFunc.
type StreamFunc = func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// WrapStream returns next with a span per model call, a child of the caller's span (the turn):
// name "chat <model id>", kind client, and the GenAI attributes (operation chat, provider,
// request and response model, input and output tokens, finish reason). A call that ends in an
// error message sets the span's status to Error with the message (redacted with
// opts.Secrets). With no recording span in ctx (tracing off) it calls next directly: off costs
// one context lookup per call.
//
// It is the hook by which pkg/llm stays free of tracing: the composition root wraps the
// stream function it hands to the loop.
func WrapStream(next StreamFunc) StreamFunc {
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		if !trace.SpanFromContext(ctx).IsRecording() || model == nil {
			return next(ctx, model, c, opts)
		}
		return func(yield func(llm.Event) bool) {
			ctx, span := Child(ctx, "chat "+model.ID, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(
					GenAIOperationName.String("chat"),
					GenAIProviderName.String(providerName(model.API)),
					GenAIRequestModel.String(model.ID),
					AgentbusProvider.String(model.Provider),
				))
			var final *llm.Message
			defer func() { endChat(span, final, opts) }()
			for ev := range next(ctx, model, c, opts) {
				if ev.Type == llm.EventDone || ev.Type == llm.EventError {
					final = ev.Message
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

func endChat(span trace.Span, m *llm.Message, opts *llm.StreamOptions) {
	defer span.End()
	if m == nil {
		span.SetStatus(codes.Error, "the model call ended without a final message")
		return
	}
	if m.Model != "" {
		span.SetAttributes(GenAIResponseModel.String(m.Model))
	}
	if m.Usage != nil {
		span.SetAttributes(GenAIUsageInputTokens.Int(m.Usage.Input), GenAIUsageOutputTokens.Int(m.Usage.Output))
	}
	if m.StopReason != "" {
		span.SetAttributes(GenAIFinishReasons.StringSlice([]string{string(m.StopReason)}))
	}
	switch m.StopReason {
	case llm.StopReasonError:
		msg := m.ErrorMessage
		if opts != nil {
			msg = llm.Redact(msg, opts.Secrets...)
		}
		span.SetAttributes(ErrorType.String("model_error"))
		span.SetStatus(codes.Error, msg)
	case llm.StopReasonAborted:
		span.SetAttributes(ErrorType.String("aborted"))
	}
}

// errToolResult is the status text of a tool call whose result is an error.
var errToolResult = errors.New("the tool's result is an error")

// WrapExecutor returns next with a span per tool call under the caller's span (the turn):
// name "execute_tool <tool>", kind client (the tool runs in a tool worker, whose own
// "execute_tool" span is this one's child), gen_ai.tool.name and gen_ai.tool.call.id (the
// model's call id). An error, or an isError result, sets the status to Error. Off (no
// recording span in ctx), next runs untouched. The call's publish injects ctx, so the tool
// worker's span continues this one.
func WrapExecutor(next loop.ToolExecutor) loop.ToolExecutor {
	return loop.ToolExecutorFunc(func(ctx context.Context, call loop.ToolCallRequest) (loop.ToolResult, error) {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next.Execute(ctx, call)
		}
		ctx, span := Child(ctx, "execute_tool "+call.Name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(ToolAttributes(call.Name, call.ID)...))
		res, err := next.Execute(ctx, call)
		status := err
		if err == nil && res.IsError {
			span.SetAttributes(ErrorType.String("tool_error"))
			status = errToolResult
		}
		End(span, status)
		return res, err
	})
}

// ToolAttributes are the GenAI attributes of a tool span.
func ToolAttributes(tool, callID string) []attribute.KeyValue {
	return []attribute.KeyValue{
		GenAIOperationName.String("execute_tool"),
		GenAIToolName.String(tool),
		GenAIToolCallID.String(callID),
	}
}

// EndTool ends a tool worker's execute_tool span: an error result sets its status to Error.
func EndTool(span trace.Span, isError bool) {
	if isError && span.IsRecording() {
		span.SetAttributes(ErrorType.String("tool_error"))
		span.SetStatus(codes.Error, errToolResult.Error())
	}
	span.End()
}
