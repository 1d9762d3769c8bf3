//! Standard output that a reader may stop reading. `println!` panics when
//! the reader has gone (`jobwire schedule list | head -1` closes the pipe
//! after one line); these end the command quietly instead, as a shell
//! pipeline expects.

use std::fmt;
use std::io::{self, Write};

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

/// Write to standard output. The reader gone (a broken pipe): exit at once
/// with success, printing nothing more, as `head` expects of what it reads.
/// Any other failure (a full disk under a redirect): say so and exit 1.
pub(crate) fn write(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args) {
        if err.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("jobwire: cannot write to standard output: {err}");
        std::process::exit(1);
    }
}
