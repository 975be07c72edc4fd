// hookbus: this plugin was written by `hookbus install opencode`; `hookbus install opencode --uninstall` removes it.
// It posts OpenCode's hook calls to the hookbus gateway and carries out the answers. No dependencies, no build
// step. The bearer token is read from $HOOKBUS_TOKEN when OpenCode runs; it is never stored here.
const HOOKBUS_URL = "__HOOKBUS_URL__"
const FAIL_CLOSED = __HOOKBUS_FAIL_CLOSED__
const TIMEOUT_MS = __HOOKBUS_TIMEOUT_MS__
// The OpenCode events this install posts (`hookbus install opencode --events`).
const EVENTS = new Set(__HOOKBUS_EVENTS__)
// Bus events hookbus records (as SessionStart, Stop, StopFailure, SessionEnd, PostCompact).
const REPORTED = new Set(["session.created", "session.idle", "session.error", "session.deleted", "session.compacted"])

class Unanswered extends Error {}

// The gateway's answer to `body`, or an Unanswered error when it cannot give one within TIMEOUT_MS.
async function post(body) {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS)
  try {
    const response = await fetch(`${HOOKBUS_URL}?dialect=opencode`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${process.env.HOOKBUS_TOKEN ?? ""}` },
      body: JSON.stringify(body),
      signal: controller.signal,
    })
    if (!response.ok) throw new Unanswered(`the gateway answered HTTP ${response.status}`)
    const answer = await response.json()
    return answer !== null && typeof answer === "object" ? answer : {}
  } catch (error) {
    if (error instanceof Unanswered) throw error
    const why = controller.signal.aborted ? `no answer within ${TIMEOUT_MS} ms` : String(error?.message ?? error)
    throw new Unanswered(why)
  } finally {
    clearTimeout(timer)
  }
}

// The answer for a call OpenCode waits on: {} when the gateway cannot answer (fail open), or a throw (fail closed).
async function decide(body) {
  try {
    return await post(body)
  } catch (error) {
    if (FAIL_CLOSED) throw new Error(`hookbus: ${error.message}; failing closed (installed with --fail-closed)`)
    return {}
  }
}

// What session.idle adds from the session's messages: the text of its last assistant message (for Stop's
// last_assistant_message) and the session's usage so far, the tokens and cost OpenCode recorded on each
// assistant message, added up (for hookbus's tokens and cost_usd counters). Undefined where it has none.
async function sessionReadout(client, sessionID) {
  try {
    const found = await client.session.messages({ path: { id: sessionID } })
    const messages = Array.isArray(found?.data) ? found.data : []
    const answers = messages.filter((m) => m?.info?.role === "assistant")
    const texts = (answers.at(-1)?.parts ?? []).filter((part) => part.type === "text").map((part) => part.text)
    let tokens = 0
    let costUsd = 0
    for (const { info } of answers) {
      const used = info.tokens ?? {}
      for (const n of [used.input, used.output, used.reasoning, used.cache?.read, used.cache?.write]) {
        if (Number.isFinite(n) && n > 0) tokens += n
      }
      if (Number.isFinite(info.cost) && info.cost > 0) costUsd += info.cost
    }
    const usage = tokens > 0 || costUsd > 0 ? { tokens: Math.round(tokens), costUsd } : undefined
    return { text: texts.length > 0 ? texts.join("\n") : undefined, usage }
  } catch {
    return {}
  }
}

function refuse(answer) {
  if (answer.decision === "deny") throw new Error(answer.reason || "Denied by hookbus policy")
}

export const HookbusPlugin = async (ctx) => {
  const common = () => ({ directory: ctx.directory, worktree: ctx.worktree, time: Date.now() })
  return {
    "tool.execute.before": async (input, output) => {
      if (!EVENTS.has("tool.execute.before")) return
      const answer = await decide({
        ...common(),
        event: "tool.execute.before",
        sessionID: input.sessionID,
        callID: input.callID,
        tool: input.tool,
        args: output.args,
      })
      refuse(answer)
      if (answer.args && typeof answer.args === "object" && output.args && typeof output.args === "object") {
        for (const key of Object.keys(output.args)) if (!(key in answer.args)) delete output.args[key]
        Object.assign(output.args, answer.args)
      }
    },
    "tool.execute.after": async (input, output) => {
      if (!EVENTS.has("tool.execute.after")) return
      let answer = {}
      try {
        answer = await post({
          ...common(),
          event: "tool.execute.after",
          sessionID: input.sessionID,
          callID: input.callID,
          tool: input.tool,
          args: input.args,
          result: { title: output.title, output: output.output, metadata: output.metadata },
        })
      } catch {
        return // the tool has run: nothing left to refuse
      }
      if (typeof answer.output === "string") output.output = answer.output
      if (typeof answer.context === "string" && answer.context) {
        output.output = `${output.output ?? ""}\n\n${answer.context}`
      }
    },
    "chat.message": async (input, output) => {
      if (!EVENTS.has("chat.message")) return
      const texts = (output.parts ?? []).filter((part) => part.type === "text" && !part.synthetic)
      const answer = await decide({
        ...common(),
        event: "chat.message",
        sessionID: input.sessionID,
        messageID: input.messageID,
        agent: input.agent,
        model: input.model,
        prompt: texts.map((part) => part.text).join("\n"),
      })
      refuse(answer)
      if (typeof answer.context === "string" && answer.context && texts.length > 0) {
        const last = texts[texts.length - 1]
        last.text = `${last.text}\n\n${answer.context}`
      }
    },
    "experimental.session.compacting": async (input, output) => {
      if (!EVENTS.has("experimental.session.compacting")) return
      let answer = {}
      try {
        answer = await post({ ...common(), event: "experimental.session.compacting", sessionID: input.sessionID })
      } catch {
        return
      }
      if (typeof answer.context === "string" && answer.context && Array.isArray(output.context)) {
        output.context.push(answer.context)
      }
    },
    event: async ({ event }) => {
      if (!REPORTED.has(event?.type) || !EVENTS.has(event.type)) return
      const properties = event.properties ?? {}
      const sessionID = properties.sessionID ?? properties.info?.id
      if (typeof sessionID !== "string") return
      const body = { ...common(), event: event.type, sessionID, properties }
      if (event.type === "session.idle") {
        const { text, usage } = await sessionReadout(ctx.client, sessionID)
        body.lastAssistantMessage = text
        body.sessionUsage = usage
      }
      try {
        await post(body)
      } catch {
        // only reported: nothing to carry out
      }
    },
  }
}
