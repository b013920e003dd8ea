// Audio on the wire and in the speaker: base64 pcm16 <-> samples, and `Player`, the
// jitter-buffered playback that knows how much of each item was heard.

export const RATE = 24000; // Hz of every audio byte on the wire

export function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

export function fromBase64(text) {
  const bin = atob(text);
  const bytes = new Uint8Array(bin.length & ~1);
  for (let i = 0; i < bytes.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}

// Plays 24 kHz pcm16 pieces back to back on one AudioContext. The first piece after
// silence (or an underrun) starts `jitter` seconds late, so pieces that arrive a little
// late still play without gaps. Keeps, per item, when each piece plays: that is how
// much of an item was heard when playback stops.
export class Player {
  constructor(ctx, jitterSeconds) {
    this.ctx = ctx;
    this.jitter = jitterSeconds;
    this.next = 0; // context time where the next piece starts
    this.items = new Map(); // item id -> {pieces: [{start, dur}], stoppedAt, receivedMs}
    this.active = new Set();
  }

  push(itemId, pcm) {
    const n = pcm.length;
    const record = this._item(itemId);
    record.receivedMs += (n * 1000) / RATE;
    if (n === 0 || record.stoppedAt !== null) return null;
    const buffer = this.ctx.createBuffer(1, n, RATE);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < n; i++) channel[i] = pcm[i] / 32768;
    const now = this.ctx.currentTime;
    if (this.next < now) this.next = now + this.jitter;
    const source = this.ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(this.ctx.destination);
    source.onended = () => this.active.delete(source);
    source.start(this.next);
    this.active.add(source);
    const start = this.next;
    record.pieces.push({ start, dur: n / RATE });
    this.next += n / RATE;
    return start;
  }

  _item(itemId) {
    let record = this.items.get(itemId);
    if (!record) {
      record = { pieces: [], stoppedAt: null, receivedMs: 0 };
      this.items.set(itemId, record);
    }
    return record;
  }

  playedMs(itemId) {
    const record = this.items.get(itemId);
    if (!record) return 0;
    const until = record.stoppedAt !== null ? record.stoppedAt : this.ctx.currentTime;
    let played = 0;
    for (const p of record.pieces) played += Math.min(Math.max(until - p.start, 0), p.dur);
    return played * 1000;
  }

  receivedMs(itemId) {
    const record = this.items.get(itemId);
    return record ? record.receivedMs : 0;
  }

  get playing() {
    return this.active.size > 0;
  }

  // Stop now; later pieces of ``itemId`` are dropped. Returns ms of it heard.
  stop(itemId) {
    const now = this.ctx.currentTime;
    for (const source of this.active) {
      try { source.stop(); } catch (_) { /* already stopped */ }
    }
    this.active.clear();
    for (const record of this.items.values()) {
      if (record.stoppedAt === null && record.pieces.length) record.stoppedAt = now;
    }
    if (itemId) this._item(itemId).stoppedAt = now;
    this.next = 0;
    return itemId ? this.playedMs(itemId) : 0;
  }
}
