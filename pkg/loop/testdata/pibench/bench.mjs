// pi-agent-core's loop on pi-ai's faux provider, the two turns of pkg/loop's BenchmarkTurn:
// plain (prompt -> one text reply) and tool (prompt -> a weather tool call, validated and run
// in-process -> a text reply). Prints one JSON line with the process CPU (user + system) per
// turn in nanoseconds: {"plain":..., "tool":..., "turns":N}. Run by BenchmarkVsPi
// (pkg/loop/vspi_test.go), or alone: node bench.mjs [turns] [plain|tool|both] [heapMiB].
// With heapMiB > 0 it first allocates that much live heap in small linked objects and keeps it
// while measuring (BenchmarkVsPi's -vspi.heap; "heapMiB" in the output is what V8 reported).
import { agentLoop } from "@mariozechner/pi-agent-core";
import { registerFauxProvider, fauxAssistantMessage, fauxToolCall, Type } from "@mariozechner/pi-ai";

const turns = Number(process.argv[2] ?? 20000);
const shape = process.argv[3] ?? "both";
const heapMiB = Number(process.argv[4] ?? 0);
const faux = registerFauxProvider();

let liveHeap = null;
let heapGrown = 0;
if (heapMiB > 0) {
	const base = process.memoryUsage().heapUsed;
	for (let i = 0; heapGrown < heapMiB * 1048576; i++) {
		liveHeap = { next: liveHeap, name: "node-" + i, a: i, b: i * 2, c: null, d: null };
		if (i % 10000 === 0) heapGrown = process.memoryUsage().heapUsed - base;
	}
}
const model = faux.getModel();

const weather = {
	name: "weather",
	label: "Weather",
	description: "Current weather for a city",
	parameters: Type.Object({
		city: Type.String(),
		unit: Type.Optional(Type.Union([Type.Literal("celsius"), Type.Literal("fahrenheit")])),
	}),
	execute: async (_id, args) => ({ content: [{ type: "text", text: `Sunny, 21 °C in ${args.city}` }], details: {} }),
};

const config = { model, convertToLlm: (msgs) => msgs };

async function turn(tools) {
	if (tools.length > 0) {
		faux.appendResponses([
			fauxAssistantMessage(fauxToolCall("weather", { city: "Berlin", unit: "celsius" }, { id: "call_1" }), { stopReason: "toolUse" }),
			fauxAssistantMessage("It is sunny and 21 °C in Berlin."),
		]);
	} else {
		faux.appendResponses([fauxAssistantMessage("Sunny, 21 °C.")]);
	}
	const ctx = { systemPrompt: "You are a helpful assistant.", messages: [], tools };
	const prompt = { role: "user", content: "What is the weather like in Berlin today?", timestamp: Date.now() };
	let events = 0;
	const stream = agentLoop([prompt], ctx, config);
	for await (const _ of stream) events++;
	return events;
}

async function measure(tools) {
	for (let i = 0; i < Math.min(2000, turns); i++) await turn(tools); // warm up the JIT
	const t0 = process.cpuUsage();
	let events = 0;
	for (let i = 0; i < turns; i++) events += await turn(tools);
	const d = process.cpuUsage(t0);
	return { ns: ((d.user + d.system) * 1000) / turns, events: events / turns };
}

const out = { turns };
if (heapMiB > 0) out.heapMiB = heapGrown / 1048576;
if (shape !== "tool") {
	const r = await measure([]);
	out.plain = r.ns;
	out.plainEvents = r.events;
}
if (shape !== "plain") {
	const r = await measure([weather]);
	out.tool = r.ns;
	out.toolEvents = r.events;
}
if (liveHeap === null && heapMiB > 0) throw new Error("heap lost"); // keeps liveHeap live
console.log(JSON.stringify(out));
