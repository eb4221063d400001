//! Repetition statistics, Markdown tables, progress and the shared context.

use std::fmt::Display;
use std::path::PathBuf;

/// Median and spread of a measurement's repetitions.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Summary {
        assert!(!values.is_empty(), "a measurement needs repetitions");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// "median (min–max)".
    pub fn cell(&self) -> String {
        format!("{} ({}–{})", num(self.median), num(self.min), num(self.max))
    }
}

/// A number with about three significant digits.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        // Three significant digits however small: a read step of a few
        // milliseconds shown as "0.003" could not be compared.
        let decimals = (2 - a.log10().floor() as i32).clamp(3, 12) as usize;
        format!("{x:.decimals$}")
    }
}

/// A Markdown table, printed with aligned columns.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Display>(head: &[S]) -> Table {
        Table {
            head: head.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.head.len(), "row width");
        self.rows.push(cells);
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }

    /// The table as Markdown, ending with a blank line.
    pub fn render(&self) -> String {
        let w: Vec<usize> = (0..self.head.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.head[i].chars().count(), 3])
                    .max()
                    .unwrap_or(3)
            })
            .collect();
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            out.push('|');
            for (c, &w) in cells.iter().zip(&w) {
                let pad = w - c.chars().count();
                out.push(' ');
                out.push_str(c);
                out.push_str(&" ".repeat(pad));
                out.push_str(" |");
            }
            out.push('\n');
        };
        line(&self.head);
        let sep: Vec<String> = w.iter().map(|&w| "-".repeat(w)).collect();
        line(&sep);
        for r in &self.rows {
            line(r);
        }
        out.push('\n');
        out
    }
}

/// What every section gets: where to put files, how hard to try, progress.
pub struct Ctx {
    pub dir: PathBuf,
    pub reps: usize,
    pub quick: bool,
    step: usize,
    total: usize,
    /// Unexpected results (wrong values, fault counts, errors), listed at the end.
    pub anomalies: Vec<String>,
    /// Rows of the closing "against the targets" table: target, measured, verdict.
    pub targets: Vec<[String; 3]>,
    /// A progress bar when stderr is a terminal; else progress goes as lines.
    bar: Option<indicatif::ProgressBar>,
}

impl Ctx {
    pub fn new(dir: PathBuf, quick: bool, reps: usize, total: usize) -> Ctx {
        Ctx {
            dir,
            reps,
            quick,
            step: 0,
            total,
            anomalies: Vec::new(),
            targets: Vec::new(),
            bar: std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
                let b = indicatif::ProgressBar::new(total as u64);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{elapsed_precise} [{bar:30}] {pos}/{len} (eta {eta}) {wide_msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                b
            }),
        }
    }

    /// Advances the progress bar (or prints "[k/N] what" to stderr).
    pub fn progress(&mut self, what: impl Display) {
        self.step += 1;
        match &self.bar {
            Some(b) => {
                b.set_message(what.to_string());
                b.set_position(self.step as u64);
            }
            None => eprintln!("[{}/{}] {what}", self.step, self.total),
        }
    }

    /// Removes the progress bar.
    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }

    /// Records something that should not happen; printed at the end of the report.
    pub fn anomaly(&mut self, what: impl Display) {
        let s = what.to_string();
        match &self.bar {
            Some(b) => b.println(format!("anomaly: {s}")),
            None => eprintln!("anomaly: {s}"),
        }
        if !self.anomalies.contains(&s) {
            self.anomalies.push(s);
        }
    }

    /// Adds a row to the closing table of targets.
    pub fn target(&mut self, target: impl Display, measured: impl Display, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "for reference",
        };
        self.targets
            .push([target.to_string(), measured.to_string(), verdict.into()]);
    }

    /// A scaled count: `full` normally, a quarter with --quick.
    pub fn count(&self, full: usize) -> usize {
        if self.quick { (full / 4).max(1) } else { full }
    }
}

/// Repetitions per measurement without --quick.
pub const REPS: usize = 7;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A fresh, empty directory for one run.
pub fn fresh(base: &std::path::Path, name: &str) -> Res<std::path::PathBuf> {
    let d = base.join(name);
    if d.exists() {
        std::fs::remove_dir_all(&d)?;
    }
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::num;

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.1234), "0.123");
        assert_eq!(num(0.001234), "0.00123");
        assert_eq!(num(0.0000456), "0.0000456");
        assert_eq!(num(-0.01234), "-0.0123");
    }
}
