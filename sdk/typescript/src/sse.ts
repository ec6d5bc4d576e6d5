/** A minimal Server-Sent Events parser: text chunks in, `{event, data}` out (no I/O). */

/** One dispatched event. */
export interface SseEvent {
  event: string;
  data: string;
}

/** Feed it decoded text as it arrives; it returns the events completed by each chunk. */
export class SseParser {
  private buffer = '';
  private kind = 'message';
  private data: string[] = [];

  /** The events completed by `chunk` (comments and ids are skipped). */
  feed(chunk: string): SseEvent[] {
    this.buffer += chunk;
    const out: SseEvent[] = [];
    let start = 0;
    for (;;) {
      const end = lineEnd(this.buffer, start);
      if (end === null) break;
      const line = this.buffer.slice(start, end.at);
      start = end.next;
      const event = this.line(line);
      if (event) out.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string): SseEvent | null {
    if (line === '') {
      const event = this.data.length > 0 ? { event: this.kind, data: this.data.join('\n') } : null;
      this.kind = 'message';
      this.data = [];
      return event;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'event') this.kind = value;
    else if (name === 'data') this.data.push(value);
    return null;
  }
}

/** Where the line starting at `from` ends (`\n`, `\r\n` or `\r`), or null if not yet known. */
function lineEnd(text: string, from: number): { at: number; next: number } | null {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) return { at: i, next: i + 1 };
    if (c === 13) {
      if (i + 1 === text.length) return null; // a \r\n may be split between chunks
      return { at: i, next: text.charCodeAt(i + 1) === 10 ? i + 2 : i + 1 };
    }
  }
  return null;
}
