/**
 * A Prometheus histogram for the hottest path: each series is bound once to
 * an array of bucket counts, an observation is one bucket search and three
 * additions, and the exposition is built when a scrape reads it, in the shape
 * prom-client's `Histogram` gives (the same lines, labels and order). A
 * prom-client observation checks the labels, hashes them and allocates on
 * every call, which costs as much as the rest of a request's metrics.
 *
 * @module
 */

import type { Histogram, Registry } from "prom-client";

/** Options of {@linkcode BucketedHistogram}. */
export interface BucketedHistogramOptions {
  readonly name: string;
  readonly help: string;
  /** Upper bounds of the buckets, ascending; `+Inf` is added. */
  readonly buckets: readonly number[];
  /** Registries that expose it. */
  readonly registers: readonly Registry[];
}

/** One series: its labels and what was observed in it. */
export interface HistogramSeries {
  /** Counts `value` in its bucket, its sum and its count. */
  observe(value: number): void;
}

type Labels = Readonly<Record<string, string>>;

class Series implements HistogramSeries {
  readonly labels: Labels;
  readonly #bounds: readonly number[];
  /** Observations per bucket (not cumulative); the last is above every bound. */
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(labels: Labels, bounds: readonly number[]) {
    this.labels = labels;
    this.#bounds = bounds;
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  observe(value: number): void {
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

/** One line of the exposition: a value, its labels and the suffixed name. */
export interface Sample {
  readonly labels: Readonly<Record<string, string | number>>;
  readonly sharedLabels?: Labels;
  readonly value: number;
  readonly metricName: string;
}

/** What a registry reads of a metric (prom-client's `MetricObjectWithValues`). */
export interface HistogramData {
  readonly name: string;
  readonly help: string;
  readonly type: "histogram";
  readonly values: readonly Sample[];
  readonly aggregator: "sum";
}

/** A histogram whose series are bound once and read at scrape (see the module doc). */
export class BucketedHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = "histogram" as const;
  readonly aggregator = "sum" as const;
  readonly #bounds: readonly number[];
  readonly #series: Series[] = [];

  constructor(options: BucketedHistogramOptions) {
    const { name, help, buckets, registers } = options;
    if (buckets.some((bound, i) => i > 0 && bound <= buckets[i - 1]!)) {
      throw new RangeError(`Cannot use buckets that do not ascend: current value is ${buckets}`);
    }
    this.name = name;
    this.help = help;
    this.#bounds = [...buckets];
    // A registry takes any object with prom-client's metric interface (name, help, type,
    // get, reset), which this one has; its type names only prom-client's own classes.
    for (const registry of registers) registry.registerMetric(this as unknown as Histogram);
  }

  /** The series of `labels`, new and empty; call once per label set and keep it. */
  series(labels: Labels): HistogramSeries {
    const series = new Series({ ...labels }, this.#bounds);
    this.#series.push(series);
    return series;
  }

  /** Empties every series (prom-client's `reset`). */
  reset(): void {
    for (const series of this.#series) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
    }
  }

  /** The samples with each series' labels apart (what a registry formats). */
  getForPromString(): Promise<HistogramData> {
    const values: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const series of this.#series) {
      const shared = series.labels;
      let cumulative = 0;
      this.#bounds.forEach((le, i) => {
        cumulative += series.counts[i]!;
        values.push({
          labels: { le },
          sharedLabels: shared,
          value: cumulative,
          metricName: bucket,
        });
      });
      values.push(
        { labels: { le: "+Inf" }, sharedLabels: shared, value: series.count, metricName: bucket },
        { labels: {}, sharedLabels: shared, value: series.sum, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: shared, value: series.count, metricName: `${this.name}_count` },
      );
    }
    return Promise.resolve(this.#object(values));
  }

  /** The samples with each series' labels merged in (prom-client's `get`). */
  async get(): Promise<HistogramData> {
    const data = await this.getForPromString();
    return this.#object(
      data.values.map(({ sharedLabels, labels, ...sample }) => ({
        ...sample,
        labels: { ...labels, ...sharedLabels },
      })),
    );
  }

  #object(values: readonly Sample[]): HistogramData {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    };
  }
}
