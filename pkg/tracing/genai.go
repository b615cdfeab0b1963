package tracing

import (
	"context"
	"errors"
	"iter"
	"sync"

	"github.com/nats-io/nats.go"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

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
			cs := chatSpanOf(model)
			ctx, span := Child(ctx, cs.name, cs.opts...)
			var final *llm.Message
			defer func() { endChat(span, model.ID, final, opts) }()
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

// chatSpan is what the spans of one model's calls start with: their name and start options
// (kind and the attributes that depend on the model only), built once per model so that a
// call allocates none of them.
type chatSpan struct {
	name string
	opts []trace.SpanStartOption
}

type chatKey struct{ id, api, provider string }

var (
	chatSpansMu sync.RWMutex
	chatSpans   = map[chatKey]*chatSpan{}
)

// maxChatSpans bounds the cache (models come from the configuration, a handful; a process
// that sees more builds the options per call past this).
const maxChatSpans = 1024

func chatSpanOf(model *llm.Model) *chatSpan {
	k := chatKey{model.ID, model.API, model.Provider}
	chatSpansMu.RLock()
	cs := chatSpans[k]
	chatSpansMu.RUnlock()
	if cs != nil {
		return cs
	}
	cs = &chatSpan{name: "chat " + model.ID, opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			GenAIOperationName.String("chat"),
			GenAIProviderName.String(providerName(model.API)),
			GenAIRequestModel.String(model.ID),
			AgentbusProvider.String(model.Provider),
		)}}
	chatSpansMu.Lock()
	if len(chatSpans) < maxChatSpans {
		chatSpans[k] = cs
	}
	chatSpansMu.Unlock()
	return cs
}

// endChat ends a model call's span with what its final message m says. Attributes that add
// nothing to the span are left out (each costs allocations in the SDK and the exporter, for
// every call): the response model when it is the requested one, and the finish reason when
// it is an ordinary end (stop, or toolUse, which the execute_tool spans that follow show).
func endChat(span trace.Span, requested string, m *llm.Message, opts *llm.StreamOptions) {
	defer span.End()
	if m == nil {
		span.SetStatus(codes.Error, "the model call ended without a final message")
		return
	}
	var kvs [4]attribute.KeyValue
	attrs := kvs[:0]
	if m.Model != "" && m.Model != requested {
		attrs = append(attrs, GenAIResponseModel.String(m.Model))
	}
	if m.Usage != nil {
		attrs = append(attrs, GenAIUsageInputTokens.Int(m.Usage.Input), GenAIUsageOutputTokens.Int(m.Usage.Output))
	}
	switch m.StopReason {
	case "", llm.StopReasonStop, llm.StopReasonToolUse:
	default:
		attrs = append(attrs, GenAIFinishReasons.StringSlice([]string{string(m.StopReason)}))
	}
	if len(attrs) > 0 {
		span.SetAttributes(attrs...)
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
		ts := toolSpanOf(call.Name, trace.SpanKindClient)
		ctx, span := Child(ctx, ts.name, ts.opts...)
		span.SetAttributes(GenAIToolCallID.String(call.ID))
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

// toolSpan is chatSpan for the execute_tool spans of one tool and kind.
type toolKey struct {
	tool string
	kind trace.SpanKind
}

var (
	toolSpansMu sync.RWMutex
	toolSpans   = map[toolKey]*chatSpan{}
)

func toolSpanOf(tool string, kind trace.SpanKind) *chatSpan {
	k := toolKey{tool, kind}
	toolSpansMu.RLock()
	ts := toolSpans[k]
	toolSpansMu.RUnlock()
	if ts != nil {
		return ts
	}
	ts = &chatSpan{name: "execute_tool " + tool, opts: []trace.SpanStartOption{trace.WithSpanKind(kind),
		trace.WithAttributes(GenAIOperationName.String("execute_tool"), GenAIToolName.String(tool))}}
	toolSpansMu.Lock()
	if len(toolSpans) < maxChatSpans {
		toolSpans[k] = ts
	}
	toolSpansMu.Unlock()
	return ts
}

// StartToolNATS starts a tool worker's "execute_tool <tool>" span (kind consumer, the GenAI
// tool attributes with callID) for the tool call whose bus message has headers h: the child
// of the turn worker's execute_tool span that h carries (StartNATS). End it with EndTool.
func StartToolNATS(ctx context.Context, tp trace.TracerProvider, h nats.Header, traceID, tool, callID string) (context.Context, trace.Span) {
	if !enabled(tp) {
		return ctx, noop.Span{}
	}
	ts := toolSpanOf(tool, trace.SpanKindConsumer)
	ctx, span := Start(ctx, tp, ts.name, ParentOf(h), traceID, ts.opts...)
	span.SetAttributes(GenAIToolCallID.String(callID))
	return ctx, span
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
