//! Standard output that a reader may stop reading. `println!` panics when
//! the reader has gone (`jobwire schedule list | head -1` closes the pipe
//! after one line); these drop the rest of the output instead, and the
//! command ends as it would have (its exit status, flushing its traces), as
//! a shell pipeline expects.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// `println!` for the command's output.
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the command's output.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

/// Set once a write found the reader gone: nothing more is written.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Write to standard output. The reader gone (a broken pipe): this and every
/// later write are dropped. Any other failure (a full disk under a
/// redirect): said on standard error, once, and later writes dropped too;
/// the command's own result stands either way.
pub(crate) fn write(args: fmt::Arguments<'_>) {
    if READER_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args) {
        READER_GONE.store(true, Ordering::Relaxed);
        if err.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("jobwire: cannot write to standard output: {err}");
        }
    }
}
