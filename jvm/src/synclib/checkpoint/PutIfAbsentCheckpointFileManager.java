package synclib.checkpoint;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.util.Arrays;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Abortable;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.PathIOException;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * Spark's streaming checkpoint on an object store (S3A), each entry written in place by one PUT.
 *
 * <p>An entry Spark must not overwrite (an offset or commit log entry) is created with S3's
 * put-if-absent ({@code If-None-Match: *}, Hadoop's {@code fs.option.create.conditional.overwrite}):
 * the store itself refuses a second writer of a batch id, which Spark then reports as a concurrent
 * update of its log. Nothing is probed before the PUT (S3A's create checks are off:
 * {@code fs.s3a.create.performance}), and an entry Spark cancels is aborted: it never appears.
 * Compared with Spark's {@code AbortableStreamBasedCheckpointFileManager}, which creates through
 * Hadoop's FileContext (a probe of the parent and two of the entry, each a HEAD and a LIST, before
 * the PUT), a new entry costs one request instead of seven, and the guarantee is the store's.
 *
 * <p>S3A retries a PUT whose answer was lost (a reset, a timeout: the first attempt may have taken
 * effect); the retry then meets the first attempt's object and is refused. So a refused entry is
 * read back: the very bytes this stream wrote are this writer's own entry, created; anything else
 * is another writer's. An offsets entry holds Spark's planning time in milliseconds, so two runs
 * planning one batch id write different bytes and the second is refused; a commits entry holds only
 * the batch's watermark, so a second run committing the same batch writes the same bytes, and taking
 * them for its own records the same fact (the Delta commit is the application transaction's, once).
 */
public final class PutIfAbsentCheckpointFileManager implements CheckpointFileManager {

  /** Hadoop's create option for put-if-absent (Options.CreateFileOptionKeys, Hadoop 3.4.2+). */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  private final Path root;
  private final FileSystem fs;

  public PutIfAbsentCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
    this.root = path;
    this.fs = path.getFileSystem(hadoopConf);
    if (!fs.hasPathCapability(path, CommonPathCapabilities.ABORTABLE_STREAM)) {
      throw new UnsupportedOperationException(
          fs.getScheme() + ": output streams cannot be aborted, which " + getClass().getSimpleName()
              + " needs at " + path + " (it is meant for S3A)");
    }
  }

  /** A Hadoop call that may fail with an IOException. */
  @FunctionalInterface
  private interface HadoopCall<T> {
    T run() throws IOException;
  }

  /** {@code call}'s result; its IOException rethrown unchecked, naming {@code what} (Spark's interface
   * declares none). As an UncheckedIOException: Spark looks through it for an interrupt, so a stop
   * that interrupts a request (an InterruptedIOException) ends the query as a stop, not a failure. */
  private static <T> T unchecked(String what, HadoopCall<T> call) {
    try {
      return call.run();
    } catch (IOException e) {
      throw new UncheckedIOException(what + " failed: " + e, e);
    }
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    FSDataOutputStream out = unchecked("creating checkpoint entry " + path,
        () -> (FSDataOutputStream) fs.createFile(path)
            .overwrite(overwriteIfPossible)
            .recursive()
            .opt(CONDITIONAL_CREATE, !overwriteIfPossible)
            .build());
    return overwriteIfPossible ? new Entry(out, out, path, null)
        : new Entry(out, new Tee(out, new ByteArrayOutputStream()), path, fs);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return unchecked("opening checkpoint entry " + path, () -> fs.open(path));
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return unchecked("listing " + path, () -> {
      try {
        return fs.listStatus(path, filter);
      } catch (FileNotFoundException e) {
        return new FileStatus[0];
      }
    });
  }

  @Override
  public void mkdirs(Path path) {
    unchecked("creating directory " + path, () -> fs.mkdirs(path, FsPermission.getDirDefault()));
  }

  @Override
  public boolean exists(Path path) {
    return unchecked("probing " + path, () -> fs.exists(path));
  }

  @Override
  public void delete(Path path) {
    unchecked("deleting " + path, () -> {
      try {
        return fs.delete(path, true);
      } catch (FileNotFoundException e) {
        return false;  // already gone: what a delete wants
      }
    });
  }

  @Override
  public boolean isLocal() {
    return fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem;
  }

  @Override
  public Path createCheckpointDirectory() {
    Path qualified = fs.makeQualified(root);
    mkdirs(qualified);
    return qualified;
  }

  /** What is written to {@code out}, also kept in {@code copy} (an entry is a few hundred bytes). */
  private static final class Tee extends FilterOutputStream {
    final ByteArrayOutputStream copy;

    Tee(OutputStream out, ByteArrayOutputStream copy) {
      super(out);
      this.copy = copy;
    }

    @Override
    public void write(int b) throws IOException {
      out.write(b);
      copy.write(b);
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      out.write(b, off, len);
      copy.write(b, off, len);
    }
  }

  /** An entry's stream: visible whole when closed, never when cancelled. */
  private static final class Entry extends CancellableFSDataOutputStream {
    private final FSDataOutputStream out;
    private final Path path;
    private final FileSystem conditional;  // the store to read a refused entry back from; null: may overwrite
    private final Tee written;
    private boolean done;

    Entry(FSDataOutputStream out, OutputStream through, Path path, FileSystem conditional) {
      super(through);
      this.out = out;
      this.path = path;
      this.conditional = conditional;
      this.written = through instanceof Tee ? (Tee) through : null;
    }

    @Override
    public synchronized void close() throws IOException {
      if (done) {
        return;
      }
      done = true;
      try {
        out.close();
      } catch (PathIOException e) {
        if (conditional == null) {
          throw e;
        }
        // The store refused the PUT (412): our own earlier attempt, whose answer was lost, or another writer.
        if (ours()) {
          return;
        }
        FileAlreadyExistsException exists = new FileAlreadyExistsException(
            path + " was created by another writer (put-if-absent refused): " + e.getMessage());
        exists.initCause(e);
        throw exists;
      }
    }

    /** Whether the entry at {@code path} holds exactly the bytes this stream wrote. */
    private boolean ours() throws IOException {
      byte[] mine = written.copy.toByteArray();
      try (FSDataInputStream in = conditional.open(path)) {
        byte[] there = in.readNBytes(mine.length + 1);
        return Arrays.equals(there, mine);
      } catch (FileNotFoundException e) {
        return false;
      }
    }

    @Override
    public synchronized void cancel() {
      if (done) {
        return;
      }
      done = true;
      OutputStream wrapped = out.getWrappedStream();
      if (wrapped instanceof Abortable) {
        ((Abortable) wrapped).abort();
      }
    }
  }
}
