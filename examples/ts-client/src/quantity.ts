// Kubernetes resource quantities as the CLI's flags take them.

export class QuantityError extends Error {}

/**
 * A CPU quantity in millicores: "500m" -> 500, "2" -> 2000, "0.25" -> 250.
 * Fractions of a millicore round up, as Kubernetes' Quantity.MilliValue does.
 */
export function parseCPU(text: string): number {
  const s = text.trim();
  const bad = () =>
    new QuantityError(`invalid CPU quantity "${text}": want millicores like 500m or cores like 0.5`);
  if (s.endsWith("m")) {
    const body = s.slice(0, -1);
    if (!/^\d+$/.test(body)) throw bad();
    return Number(body);
  }
  if (!/^\d+(\.\d+)?$/.test(s)) throw bad();
  const milli = Math.max(0, Math.ceil(Number(s) * 1000 - 1e-9));
  if (!Number.isSafeInteger(milli)) throw bad();
  return milli;
}

const MEMORY_SUFFIXES: [string, number][] = [
  // Binary suffixes first: "Mi" must not be read as "M" + "i".
  ["Ki", 2 ** 10],
  ["Mi", 2 ** 20],
  ["Gi", 2 ** 30],
  ["Ti", 2 ** 40],
  ["Pi", 2 ** 50],
  ["k", 1e3],
  ["M", 1e6],
  ["G", 1e9],
  ["T", 1e12],
  ["P", 1e15],
];

/** A memory quantity in bytes: "536870912", "512Mi", "1Gi", "1.5G". */
export function parseMemory(text: string): number {
  const s = text.trim();
  const bad = () =>
    new QuantityError(
      `invalid memory quantity "${text}": want bytes, or a number with Ki/Mi/Gi/Ti or k/M/G/T, e.g. 512Mi`,
    );
  let number = s;
  let factor = 1;
  for (const [suffix, f] of MEMORY_SUFFIXES) {
    if (s.endsWith(suffix)) {
      number = s.slice(0, -suffix.length);
      factor = f;
      break;
    }
  }
  if (!/^\d+(\.\d+)?$/.test(number)) throw bad();
  const bytes = Math.ceil(Number(number) * factor);
  if (!Number.isSafeInteger(bytes)) throw bad();
  return bytes;
}

/** Bytes the short way a person reads them: 512Mi, 2Gi; else plain bytes. */
export function formatMemory(bytes: number): string {
  for (const [suffix, factor] of [
    ["Ti", 2 ** 40],
    ["Gi", 2 ** 30],
    ["Mi", 2 ** 20],
    ["Ki", 2 ** 10],
  ] as const) {
    if (bytes >= factor && bytes % factor === 0) return `${bytes / factor}${suffix}`;
  }
  return String(bytes);
}

/** A duration flag: "10s", "500ms", "2m", or plain seconds ("1.5"). Milliseconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (m === null) {
    throw new QuantityError(`invalid duration "${text}": want e.g. 10s, 500ms or 2m`);
  }
  const value = Number(m[1]);
  const ms = m[2] === "ms" ? value : m[2] === "m" ? value * 60_000 : value * 1000;
  if (!(ms > 0)) throw new QuantityError(`invalid duration "${text}": must be positive`);
  return ms;
}
