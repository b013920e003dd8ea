// Microphone capture on the audio thread: mono float samples at the AudioContext's rate
// in, 24 kHz 16-bit PCM out, posted to the page in blocks of `blockMs` (transferred
// ArrayBuffers, little-endian Int16 as on every browser platform).
//
// Downsampling averages the input samples that fall into each output period (a box
// filter: enough anti-aliasing for speech, exact 2:1 from the usual 48 kHz); upsampling
// (a 16 kHz device) interpolates linearly.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.outRate = opts.outRate || 24000;
    this.step = sampleRate / this.outRate; // input samples per output sample
    this.block = Math.max(1, Math.round((this.outRate * (opts.blockMs || 40)) / 1000));
    this.out = new Int16Array(this.block);
    this.n = 0;
    this.sum = 0; // box filter (downsampling)
    this.count = 0;
    this.phase = 0;
    this.last = 0; // linear interpolation (upsampling)
    this.t = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true; // no source yet (or it ended)
    const samples = input[0];
    if (this.step >= 1) {
      for (let i = 0; i < samples.length; i++) {
        this.sum += samples[i];
        this.count += 1;
        this.phase += 1;
        if (this.phase >= this.step) {
          this.phase -= this.step;
          this.emit(this.sum / this.count);
          this.sum = 0;
          this.count = 0;
        }
      }
    } else {
      for (let i = 0; i < samples.length; i++) {
        const x = samples[i];
        while (this.t <= 1) {
          this.emit(this.last + (x - this.last) * this.t);
          this.t += this.step;
        }
        this.t -= 1;
        this.last = x;
      }
    }
    return true;
  }

  emit(value) {
    const v = Math.max(-1, Math.min(1, value));
    this.out[this.n++] = v < 0 ? Math.round(v * 32768) : Math.round(v * 32767);
    if (this.n === this.block) {
      this.port.postMessage(this.out.buffer, [this.out.buffer]);
      this.out = new Int16Array(this.block);
      this.n = 0;
    }
  }
}

registerProcessor("capture-processor", CaptureProcessor);
