package webconsole

import (
	"net/http"
	"strings"
)

// Languages the console speaks; the first is the default.
var languages = []string{"en", "zh"}

// messages holds every UI string per language. Keys are used by the templates as {{$.L.key}}.
var messages = map[string]map[string]string{
	"en": {
		"title": "agentbus console", "overview": "Overview", "sessions": "Sessions", "deadletters": "Dead letters", "config": "Config",
		"replicas": "Role replicas alive", "role": "Role", "host": "Host", "pid": "PID", "version": "Version", "uptime": "Uptime", "adapters": "Adapters",
		"noReplicas": "No role replica has announced itself (KV presence is empty: none running, or roles of an older version).",
		"turnsToday": "Turns today", "turnsPerMin": "Turns/min (10 min)", "failuresToday": "Failures today", "tokensToday": "Tokens today (in/out)",
		"costToday": "Cost today", "deadLetters": "Dead letters", "lastHour": "last hour", "sessionsCount": "Sessions", "byModel": "By model",
		"model": "Model", "calls": "Calls", "platform": "Platform", "scene": "Scene", "lastActivity": "Last activity", "turns": "Turns",
		"tokens": "Tokens", "cost": "Cost", "search": "Search", "searchText": "also in message text", "prev": "Previous", "next": "Next",
		"page": "Page", "of": "of", "noSessions": "No sessions.", "epoch": "Epoch", "status": "Status", "live": "live",
		"inbound": "Inbound", "modelCall": "Model call", "toolCall": "Tool call", "reply": "Reply", "latency": "latency", "stop": "stop",
		"in": "in", "out": "out", "args": "arguments", "result": "result", "error": "error", "worker": "worker", "duration": "duration",
		"sent": "sent", "pending": "pending", "dead-lettered": "dead-lettered", "local": "not sent (fork)", "retried": "retried",
		"fork": "Fork from here", "forkModel": "model", "forkSameModel": "(the original's model)", "forkPrompt": "system prompt", "forkPromptHint": "optional: who the assistant is in the fork", "forkRun": "Run fork", "forkOf": "Fork of", "original": "Original", "forked": "Fork",
		"compare": "Side by side", "noTurns": "No turns yet.", "reason": "Reason", "session": "Session", "time": "Time", "retry": "Retry",
		"discard": "Discard", "noDeadLetters": "No dead letters.", "configNote": "Effective configuration; every secret is redacted.",
		"noConfig": "This console was started without a configuration file.", "loginTitle": "Sign in", "token": "Token",
		"loginHint": "Open the URL the console printed at start, or paste its token.", "signIn": "Sign in", "committed": "committed",
		"failed": "failed", "open": "open", "forks": "Forks", "body": "Message", "deliveries": "deliveries", "subject": "Subject",
		"thinking": "thinking", "lang": "中文", "confirmDiscard": "Discard this dead letter?", "turn": "Turn", "marks": "marks", "sessionsOwned": "Sessions owned",
		"forkHint": "then “Fork from here” on a turn: its message and every later one run again in a fork that never posts to the platform.",
	},
	"zh": {
		"title": "agentbus 控制台", "overview": "概览", "sessions": "会话", "deadletters": "死信", "config": "配置",
		"replicas": "在线角色副本", "role": "角色", "host": "主机", "pid": "进程", "version": "版本", "uptime": "运行时间", "adapters": "适配器",
		"noReplicas": "没有角色副本登记（KV presence 为空：没有在运行，或角色版本较旧）。",
		"turnsToday": "今日轮次", "turnsPerMin": "每分钟轮次（10 分钟）", "failuresToday": "今日失败", "tokensToday": "今日 token（输入/输出）",
		"costToday": "今日费用", "deadLetters": "死信", "lastHour": "最近一小时", "sessionsCount": "会话数", "byModel": "按模型",
		"model": "模型", "calls": "调用", "platform": "平台", "scene": "场景", "lastActivity": "最近活动", "turns": "轮次",
		"tokens": "Token", "cost": "费用", "search": "搜索", "searchText": "也搜索消息内容", "prev": "上一页", "next": "下一页",
		"page": "第", "of": "页，共", "noSessions": "没有会话。", "epoch": "纪元", "status": "状态", "live": "实时",
		"inbound": "收到", "modelCall": "模型调用", "toolCall": "工具调用", "reply": "回复", "latency": "延迟", "stop": "结束原因",
		"in": "输入", "out": "输出", "args": "参数", "result": "结果", "error": "错误", "worker": "工作进程", "duration": "耗时",
		"sent": "已发送", "pending": "待发送", "dead-lettered": "已进死信", "local": "未发送（分叉）", "retried": "已重试",
		"fork": "从这里分叉", "forkModel": "模型", "forkSameModel": "（原会话的模型）", "forkPrompt": "系统提示词", "forkPromptHint": "可选：分叉里助手的身份", "forkRun": "运行分叉", "forkOf": "分叉自", "original": "原会话", "forked": "分叉",
		"compare": "并排对比", "noTurns": "还没有轮次。", "reason": "原因", "session": "会话", "time": "时间", "retry": "重试",
		"discard": "丢弃", "noDeadLetters": "没有死信。", "configNote": "生效的配置；所有密钥均已隐去。",
		"noConfig": "此控制台启动时没有配置文件。", "loginTitle": "登录", "token": "令牌",
		"loginHint": "打开控制台启动时打印的网址，或粘贴其中的令牌。", "signIn": "登录", "committed": "已提交",
		"failed": "失败", "open": "进行中", "forks": "分叉", "body": "消息", "deliveries": "投递次数", "subject": "主题",
		"thinking": "思考", "lang": "English", "confirmDiscard": "丢弃这条死信？", "turn": "轮次", "marks": "标记", "sessionsOwned": "持有会话",
		"forkHint": "然后在某一轮点“从这里分叉”：该消息及其后的消息会在分叉中重新运行，分叉不会发到平台。",
	},
}

// language picks the page's language: ?lang=, then the lang cookie, then Accept-Language.
func language(r *http.Request) string {
	if l := r.URL.Query().Get("lang"); messages[l] != nil {
		return l
	}
	if c, err := r.Cookie("lang"); err == nil && messages[c.Value] != nil {
		return c.Value
	}
	for _, part := range strings.Split(r.Header.Get("Accept-Language"), ",") {
		tag := strings.ToLower(strings.TrimSpace(strings.SplitN(part, ";", 2)[0]))
		for _, l := range languages {
			if tag == l || strings.HasPrefix(tag, l+"-") {
				return l
			}
		}
	}
	return languages[0]
}

func otherLanguage(l string) string {
	if l == "zh" {
		return "en"
	}
	return "zh"
}
