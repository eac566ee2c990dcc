//! The SQL front-end (docs/DESIGN.md "SQL"): a query over registered views is
//! parsed and planned by DataFusion (`datafusion-sql`) and the logical plan is
//! lowered to a small tree of streaming steps, [`SqlNode`], whose expressions
//! are eddyline's own [`Expr`]. The Python layer builds the job from that tree
//! by calling the same DSL methods a hand-written job calls, so a query and
//! its DSL twin give the same graph: DataFusion plans, eddyline executes.
//!
//! What a stream cannot run (a global `ORDER BY`, a `LIMIT`, an unknown table
//! or column) is a [`SqlError`] naming the construct, raised here, before any
//! operator exists.

mod aggregate;
mod closing;
mod convert;
mod join;
mod lower;
mod over;
mod provider;
mod prune;
mod rename;
mod spark_window;
mod time;
mod tvf;
mod unwindow;

use std::fmt;

use arrow::datatypes::SchemaRef;

use crate::expr::Expr;

pub use spark_window::column_name as spark_window_column;
pub use tvf::interval_ms;

/// A view a query may read: its name, schema and event-time column.
#[derive(Debug, Clone)]
pub struct View {
    pub name: String,
    pub schema: SchemaRef,
    pub time_column: Option<String>,
}

/// Event-time windows: Flink's windowing table functions or Spark's
/// `window()` / `session_window()` grouping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowKind {
    /// `TUMBLE(..., size)` / `window(ts, size)`.
    Tumble { size_ms: i64 },
    /// `HOP(..., slide, size)` / `window(ts, size, slide)`.
    Hop { size_ms: i64, slide_ms: i64 },
    /// `SESSION(..., gap)` / `session_window(ts, gap)`.
    Session { gap_ms: i64 },
}

/// The windows a `GROUP BY` of a windowed aggregate's results by its event
/// time is lowered to (sql/time.rs): 1 ms, so each row's time is its
/// window's end - 1 ms.
pub(crate) const REGROUP: WindowKind = WindowKind::Tumble { size_ms: 1 };

/// One aggregate of a `GROUP BY`: the function (the name of eddyline's
/// aggregate, as `F` spells it: `sum`, `count`, `count_distinct`, `avg`,
/// `approx_percentile`...), its arguments as `F`'s aggregate takes them
/// (`count(*)` is `count` of the literal 1), the column it reads when its
/// one argument is a plain column (None: `count(*)` or an expression) and
/// the name of its output column.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateCall {
    pub function: String,
    pub args: Vec<Expr>,
    pub column: Option<String>,
    pub name: String,
}

/// How a join bounds the rows it keeps (docs/API.md "SQL", joins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinKind {
    /// An equi-join without a time bound (`state_ttl` may bound its state).
    Regular,
    /// `lower_ms <= right.ts - left.ts <= upper_ms` on the inputs' event time.
    Interval { lower_ms: i64, upper_ms: i64 },
    /// Both inputs through the same windowing table function, joined on
    /// `window_start` and `window_end`.
    Window(WindowKind),
    /// `FOR SYSTEM_TIME AS OF left.ts`: the right input is versioned.
    Temporal,
}

/// A lowered query: one streaming step per node, children first.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlNode {
    /// The stream of a registered view.
    Scan { view: String, columns: Vec<String> },
    /// A windowing table function over a view: the view's rows, each to be
    /// grouped into windows of `kind` on `time_column`; the node adds the
    /// `window_start` and `window_end` columns (valid only in a `GROUP BY`).
    Window {
        input: Box<SqlNode>,
        time_column: String,
        kind: WindowKind,
        columns: Vec<String>,
    },
    /// Rows where `predicate` holds.
    Filter {
        input: Box<SqlNode>,
        predicate: Expr,
        columns: Vec<String>,
    },
    /// Named expressions, in order.
    Project {
        input: Box<SqlNode>,
        exprs: Vec<(String, Expr)>,
    },
    /// `UNION ALL` of inputs with the same column names.
    Union { inputs: Vec<SqlNode> },
    /// `GROUP BY` the key columns with aggregates; `window` is Spark's
    /// `window(time_column, ...)` / `session_window(...)` grouping, None
    /// otherwise: its column (`spark_window_column`, a struct of `start`
    /// and `end`) is among `columns` where the query grouped by it, not
    /// among `keys`.
    Aggregate {
        input: Box<SqlNode>,
        keys: Vec<String>,
        aggregates: Vec<AggregateCall>,
        window: Option<(String, WindowKind)>,
        columns: Vec<String>,
    },
    /// A join of two streams on key columns (`left_on[i] = right_on[i]`),
    /// `how` one of `inner`, `left`, `right`, `outer`; `columns` are the
    /// join operator's output (keys, window bounds, the left's other columns,
    /// the right's with `_right` on a clash). `time_columns`: the inputs'
    /// event-time columns the join's time bound reads.
    Join {
        left: Box<SqlNode>,
        right: Box<SqlNode>,
        how: String,
        left_on: Vec<String>,
        right_on: Vec<String>,
        kind: JoinKind,
        time_columns: Option<(String, String)>,
        columns: Vec<String>,
    },
    /// The rows of `input` (an inner interval join's, filtered by a bound of
    /// one input's event time by a column of each row of the other, `b.ts <=
    /// a.expires`: sql/join.rs), each of which comes before the watermark
    /// passes its `column`; rows pass unchanged. A `GROUP BY` whose keys hold
    /// `column` closes each group when the watermark passes it (lower.rs).
    Closing { input: Box<SqlNode>, column: String },
    /// `agg(col) OVER (...)` (sql/over.rs): every row of `input` with the
    /// `aggregates` (sum, count, avg, min, max) of its `frame` added as
    /// columns, once the watermark passes its time.
    Over {
        input: Box<SqlNode>,
        frame: OverFrame,
        aggregates: Vec<AggregateCall>,
        columns: Vec<String>,
    },
}

/// The `OVER (PARTITION BY keys ORDER BY time_column, order_by... ROWS|RANGE
/// BETWEEN preceding PRECEDING AND CURRENT ROW)` that every function of one
/// over window shares (sql/over.rs): what partitions and orders its rows,
/// and where each row's frame starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverFrame {
    pub keys: Vec<String>,
    pub time_column: String,
    pub order_by: Vec<String>,
    /// `ROWS`: rows before the current one; `RANGE` (`range`): milliseconds
    /// of event time before the current row's; None: `UNBOUNDED`.
    pub preceding: Option<u64>,
    /// A `RANGE` frame: rows of one event time (peers) share it.
    pub range: bool,
}

impl SqlNode {
    /// The node's output column names.
    pub fn columns(&self) -> Vec<String> {
        match self {
            SqlNode::Scan { columns, .. }
            | SqlNode::Window { columns, .. }
            | SqlNode::Filter { columns, .. }
            | SqlNode::Aggregate { columns, .. }
            | SqlNode::Join { columns, .. }
            | SqlNode::Over { columns, .. } => columns.clone(),
            SqlNode::Project { exprs, .. } => exprs.iter().map(|(n, _)| n.clone()).collect(),
            SqlNode::Union { inputs } => inputs.first().map(SqlNode::columns).unwrap_or_default(),
            SqlNode::Closing { input, .. } => input.columns(),
        }
    }

    /// Whether the node passes on the rows of a windowing table function
    /// (whose `window_start`/`window_end` exist only in its `GROUP BY`).
    pub(crate) fn passes_window_rows(&self) -> bool {
        match self {
            SqlNode::Window { .. } => true,
            SqlNode::Filter { input, .. } | SqlNode::Project { input, .. } => {
                input.passes_window_rows()
            }
            _ => false,
        }
    }
}

/// SQL that eddyline cannot run as a stream, or that does not plan: the
/// construct (`ORDER BY`, `LIMIT`, `table`, `column`, `syntax`, ...) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub construct: String,
    pub message: String,
}

impl SqlError {
    pub(crate) fn new(construct: impl Into<String>, message: impl Into<String>) -> Self {
        SqlError {
            construct: construct.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SQL {}: {}", self.construct, self.message)
    }
}

impl std::error::Error for SqlError {}

/// Plans `query` (one `SELECT`, `WITH` or `UNION ALL` query) over `views`.
pub fn plan(query: &str, views: &[View]) -> Result<SqlNode, SqlError> {
    let mut rewritten = tvf::rewrite(query, views)?;
    spark_window::rewrite(&mut rewritten.statement)?;
    // A versioned table (`v FOR SYSTEM_TIME AS OF ...`) plans as a copy of its view.
    let mut catalog = views.to_vec();
    catalog.extend(rewritten.temporals.iter().filter_map(|t| {
        let view = views.iter().find(|v| v.name == t.view)?;
        Some(View {
            name: t.name.clone(),
            ..view.clone()
        })
    }));
    let provider = provider::Provider::new(&catalog, &rewritten.windows);
    let plan = provider.plan(&rewritten.statement)?;
    let lowered = lower::Lowering {
        views,
        windows: &rewritten.windows,
        temporals: &rewritten.temporals,
    }
    .lower(&plan)?;
    Ok(prune::prune(lowered))
}
