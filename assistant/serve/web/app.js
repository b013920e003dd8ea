// The daemon's browser client: microphone -> input_audio_buffer.append (24 kHz pcm16),
// response.output_audio.delta -> WebAudio through a jitter buffer, barge-in ->
// stop playback at once and conversation.item.truncate with the audio actually played.
//
// Page options (URL query): aec=0 turns the browser's echo cancellation, noise
// suppression and gain control off (tests feed a WAV file as the microphone);
// jitter_ms=N sets the playback buffer (default 80 ms).
//
// `window.assistantClient` exposes what the page shows, for tests and curious users.
// An ES module: no build step, loaded by the browser as it is.
import { Player, RATE, fromBase64, toBase64 } from "./audio.js";

const params = new URLSearchParams(location.search);
const processing = params.get("aec") !== "0";
const jitterMs = Math.max(0, Number(params.get("jitter_ms") || 80));

const $ = (id) => document.getElementById(id);
const ui = {
  button: $("talk"), token: $("token"), message: $("message"),
  status: $("status"), state: $("state"), latency: $("latency"), log: $("log"),
};

const view = {
  connected: false,
  state: "idle",
  message: "",
  turns: [], // {role, id, text, heard, status}
  truncations: [], // {item_id, audio_end_ms, received_ms, context_time}
  latenciesMs: [], // end of speech detected -> first reply audio heard
  audio: { contextTime: 0, receivedMs: 0, playedMs: 0, sources: 0 },
  errors: [],
};
view.playedMs = (itemId) => (session ? session.player.playedMs(itemId) : 0);
window.assistantClient = view;

// ------------------------------------------------------------------ transcript

function turn(role, id) {
  let t = view.turns.find((x) => x.role === role && x.id === id);
  if (!t) {
    t = { role, id, text: "", heard: null, status: "pending" };
    view.turns.push(t);
    const li = document.createElement("li");
    li.className = `${role} pending`;
    li.dataset.item = id;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "you" : "assistant";
    const text = document.createElement("span");
    text.className = "text";
    const unheard = document.createElement("span");
    unheard.className = "unheard";
    li.append(who, text, unheard);
    ui.log.append(li);
    t.li = li;
    li.scrollIntoView({ block: "end" });
  }
  return t;
}

function render(t) {
  const [text, unheard] = [t.li.querySelector(".text"), t.li.querySelector(".unheard")];
  t.li.classList.toggle("pending", t.status === "pending");
  if (t.heard !== null) {
    text.textContent = t.heard;
    unheard.textContent = t.text.startsWith(t.heard) ? t.text.slice(t.heard.length) : "";
    unheard.title = "not heard: the assistant forgot this part";
  } else {
    text.textContent = t.text || (t.role === "user" ? "\u2026" : "");
    unheard.textContent = "";
  }
}

function say(message) {
  view.message = message;
  ui.message.textContent = message;
}

// ------------------------------------------------------------------ session

let session = null;

class Session {
  constructor(token) {
    this.token = token;
    this.ctx = new AudioContext({ latencyHint: "interactive" }); // inside the click
    this.player = new Player(this.ctx, jitterMs / 1000);
    this.ws = null;
    this.opened = false;
    this.closed = false;
    this.stream = null;
    this.node = null;
    this.responding = false;
    this.responseItem = null; // the item of the response in progress
    this.audioItem = null; // the assistant item whose audio plays or last played
    this.speechStoppedAt = null; // performance.now() of the last speech_stopped
    this.awaitingFirstAudio = false;
    this.timer = setInterval(() => this.tick(), 100);
  }

  async open() {
    await this.ctx.resume();
    const protocols = ["realtime"];
    if (this.token) protocols.push(`openai-insecure-api-key.${this.token}`);
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.ws = new WebSocket(`${scheme}//${location.host}/v1/realtime`, protocols);
    this.ws.onopen = () => this.onOpen();
    this.ws.onmessage = (ev) => this.onMessage(ev.data);
    this.ws.onclose = (ev) => this.onClose(ev);
    setStatus("connecting\u2026");
  }

  async onOpen() {
    this.opened = true;
    view.connected = true;
    setStatus("connected");
    try {
      await this.startMic();
    } catch (err) {
      say(`Microphone unavailable: ${err && err.message ? err.message : err}`);
      if (session === this) stop();
    }
  }

  async startMic() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: {
        channelCount: 1,
        echoCancellation: processing,
        noiseSuppression: processing,
        autoGainControl: processing,
      },
    });
    if (this.closed) return;
    await this.ctx.audioWorklet.addModule("capture-worklet.js");
    const source = this.ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.ctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1,
      channelCountMode: "explicit", channelInterpretation: "speakers",
      processorOptions: { outRate: RATE, blockMs: 40 },
    });
    this.node.port.onmessage = (ev) => this.send({
      type: "input_audio_buffer.append", audio: toBase64(ev.data),
    });
    const mute = this.ctx.createGain(); // keeps the worklet pulled, plays nothing
    mute.gain.value = 0;
    source.connect(this.node).connect(mute).connect(this.ctx.destination);
    setState("listening");
  }

  send(event) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(event));
  }

  onMessage(data) {
    let event;
    try {
      event = JSON.parse(data);
    } catch (_) {
      return;
    }
    const handler = HANDLERS[event.type];
    if (handler) handler(this, event);
  }

  async onClose(ev) {
    const wasOpen = this.opened;
    const mine = this.closed;
    this.shutdown();
    if (mine) return;
    const why = wasOpen ? `Disconnected (${ev.code}${ev.reason ? `: ${ev.reason}` : ""}).`
      : await diagnose(this.token);
    if (session !== this) return; // the user has moved on meanwhile
    if (!wasOpen || !view.message) say(why);
    stop();
  }

  // Barge-in: the user started talking. Stop the reply now and tell the daemon how
  // much of it was heard, so the conversation keeps only that.
  bargeIn() {
    const item = this.audioItem;
    if (!item) return;
    const wasPlaying = this.player.playing;
    const heard = Math.floor(this.player.stop(item));
    const received = this.player.receivedMs(item);
    const generating = this.responding && this.responseItem === item;
    if (generating || (wasPlaying && heard < received)) {
      const cut = { item_id: item, audio_end_ms: heard, received_ms: Math.round(received),
                    context_time: this.ctx.currentTime };
      view.truncations.push(cut);
      this.send({ type: "conversation.item.truncate", item_id: item, content_index: 0,
                  audio_end_ms: heard });
    }
    this.audioItem = null;
  }

  tick() {
    view.audio.contextTime = this.ctx.currentTime;
    view.audio.sources = this.player.active.size;
    if (this.audioItem) {
      view.audio.playedMs = this.player.playedMs(this.audioItem);
      view.audio.receivedMs = this.player.receivedMs(this.audioItem);
    }
    if (view.state === "speaking" && !this.player.playing && !this.responding) {
      setState("listening");
    }
  }

  shutdown() {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    this.player.stop(null);
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.node) this.node.port.onmessage = null;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "client stopped");
    this.ctx.close().catch(() => {});
    view.connected = false;
  }
}

// Why a session could not be opened: ask the daemon over plain HTTP (a browser never
// sees the status of a refused WebSocket handshake).
async function diagnose(token) {
  try {
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const r = await fetch("/v1/realtime", { cache: "no-store", headers });
    const reason = (await r.text()).trim();
    if (r.status === 401) {
      return token
        ? `The daemon refused the token (${reason}). Check the token field.`
        : `This daemon needs a token (${reason}): enter it in the token field.`;
    }
    if (r.status === 403) return `The daemon refused this page: ${reason}`;
    return `Could not open a session (HTTP ${r.status}${reason ? `: ${reason}` : ""}).`;
  } catch (_) {
    return "Cannot reach the daemon: is `assistant serve` running?";
  }
}

function onAudioDelta(s, e) {
  if (s.audioItem !== e.item_id && s.player.items.has(e.item_id)) return; // cut item
  s.audioItem = e.item_id;
  const start = s.player.push(e.item_id, fromBase64(e.delta));
  if (start !== null && s.awaitingFirstAudio) {
    s.awaitingFirstAudio = false;
    if (s.speechStoppedAt !== null) {
      const ms = performance.now() - s.speechStoppedAt + (start - s.ctx.currentTime) * 1000;
      view.latenciesMs.push(Math.round(ms));
      ui.latency.textContent = `${Math.round(ms)} ms from the end of your turn to the reply's first sound`;
    }
  }
  if (start !== null) setState("speaking");
}

function onTextDelta(s, e) {
  const t = turn("assistant", e.item_id);
  t.text += e.delta;
  render(t);
}

const HANDLERS = {
  "session.created": () => say(""),
  "input_audio_buffer.speech_started": (s, e) => {
    s.bargeIn();
    turn("user", e.item_id);
    setState("you are speaking");
  },
  "input_audio_buffer.speech_stopped": (s) => {
    s.speechStoppedAt = performance.now();
    s.awaitingFirstAudio = true;
    setState("thinking");
  },
  "conversation.item.input_audio_transcription.completed": (s, e) => {
    const t = turn("user", e.item_id);
    t.text = e.transcript;
    t.status = "completed";
    render(t);
  },
  "response.created": (s) => {
    s.responding = true;
    s.responseItem = null;
    if (view.state !== "you are speaking") setState("thinking");
  },
  "response.output_item.added": (s, e) => {
    s.responseItem = e.item.id;
    turn("assistant", e.item.id);
  },
  "response.output_audio.delta": onAudioDelta,
  "response.output_audio_transcript.delta": onTextDelta,
  "response.output_text.delta": onTextDelta,
  "response.done": (s, e) => {
    s.responding = false;
    for (const item of e.response.output || []) {
      const t = turn("assistant", item.id);
      t.status = e.response.status;
      render(t);
    }
    if (!s.player.playing && view.state !== "you are speaking") setState("listening");
  },
  // A reply withdrawn as it began: the user went on with their turn, and the daemon
  // answers the whole of it instead. It leaves the transcript as it left the context.
  "conversation.item.deleted": (s, e) => {
    if (s.audioItem === e.item_id) {
      s.player.stop(e.item_id);
      s.audioItem = null;
    }
    const i = view.turns.findIndex((x) => x.id === e.item_id);
    if (i >= 0) {
      view.turns[i].li.remove();
      view.turns.splice(i, 1);
    }
  },
  "conversation.item.truncated": (s, e) => {
    s.send({ type: "conversation.item.retrieve", item_id: e.item_id });
  },
  "conversation.item.retrieved": (s, e) => {
    const part = (e.item.content || [])[0] || {};
    const t = turn(e.item.role, e.item.id);
    t.heard = part.transcript || part.text || "";
    render(t);
  },
  error: (s, e) => {
    view.errors.push(e.error);
    say(`Daemon error: ${e.error.message}`);
  },
};

// ------------------------------------------------------------------ page

function setStatus(text) {
  ui.status.textContent = text;
}

function setState(state) {
  view.state = state;
  ui.state.textContent = state;
}

async function start() {
  say("");
  ui.button.textContent = "Stop";
  ui.button.classList.add("on");
  session = new Session(ui.token.value.trim());
  try {
    await session.open();
  } catch (err) {
    say(`Cannot start: ${err && err.message ? err.message : err}`);
    stop();
  }
}

function stop() {
  if (session) session.shutdown();
  session = null;
  ui.button.textContent = "Start talking";
  ui.button.classList.remove("on");
  setStatus("not connected");
  setState("idle");
}

ui.button.addEventListener("click", () => (session ? stop() : start()));
