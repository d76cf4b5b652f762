/**
 * `@tensorflow/tfjs-core`'s Node (CommonJS) build does not register the chained tensor methods
 * (`t.as3D()`, `t.expandDims()`, …); the full `@tensorflow/tfjs` package does that through ESM side-effect
 * modules, and it is not installed. face-api calls these methods, so we install them here exactly as
 * `tfjs-core/dist/public/chained_ops/*.js` defines them: nearly all are `op(this, ...args)`.
 */
type Ops = Record<string, any>;

const SAME_NAME_OPS = (
  'abs acos acosh add all any argMax argMin asin asinh atan atan2 atanh avgPool batchToSpaceND batchNorm broadcastTo ' +
  'ceil clipByValue conv1d conv2d conv2dTranspose cos cosh cumprod cumsum depthToSpace depthwiseConv2d dilation2d div ' +
  'divNoNan dot elu equal erf euclideanNorm exp expandDims expm1 fft floor floorDiv gather greater greaterEqual ifft ' +
  'irfft isFinite isInf isNaN leakyRelu less lessEqual localResponseNormalization log log1p logSigmoid logSoftmax ' +
  'logSumExp logicalAnd logicalNot logicalOr logicalXor matMul max maxPool maximum mean min minimum mirrorPad mod mul ' +
  'neg norm notEqual oneHot onesLike pad pool pow prelu prod reciprocal relu relu6 reshape reverse rfft round rsqrt ' +
  'selu separableConv2d sigmoid sign sin sinh slice softmax softplus spaceToBatchND split sqrt square squaredDifference ' +
  'squeeze step stridedSlice sub sum tan tanh tile topk transpose unique unsortedSegmentSum unstack zerosLike'
).split(' ');

export function installChainedOps(tf: Ops): void {
  const proto = tf.Tensor.prototype as Record<string, unknown>;
  if (typeof proto.as3D === 'function') return;
  const define = (name: string, fn: (this: any, ...args: any[]) => unknown) => {
    if (typeof proto[name] === 'function') return;
    proto[name] = function (this: any, ...args: any[]) {
      this.throwIfDisposed();
      return fn.apply(this, args);
    };
  };
  for (const name of SAME_NAME_OPS) {
    if (typeof tf[name] === 'function')
      define(name, function (this: any, ...args: any[]) {
        return tf[name](this, ...args);
      });
  }
  define('as1D', function (this: any) {
    return tf.reshape(this, [this.size]);
  });
  define('as2D', function (this: any, a: number, b: number) {
    return tf.reshape(this, [a, b]);
  });
  define('as3D', function (this: any, a: number, b: number, c: number) {
    return tf.reshape(this, [a, b, c]);
  });
  define('as4D', function (this: any, a: number, b: number, c: number, d: number) {
    return tf.reshape(this, [a, b, c, d]);
  });
  define('as5D', function (this: any, a: number, b: number, c: number, d: number, e: number) {
    return tf.reshape(this, [a, b, c, d, e]);
  });
  define('asScalar', function (this: any) {
    return tf.reshape(this, []);
  });
  define('asType', function (this: any, dtype: string) {
    return tf.cast(this, dtype);
  });
  define('flatten', function (this: any) {
    return tf.reshape(this, [this.size]);
  });
  define('reshapeAs', function (this: any, x: { shape: number[] }) {
    return tf.reshape(this, x.shape);
  });
  define('toBool', function (this: any) {
    return tf.cast(this, 'bool');
  });
  define('toFloat', function (this: any) {
    return tf.cast(this, 'float32');
  });
  define('toInt', function (this: any) {
    return tf.cast(this, 'int32');
  });
  define('resizeBilinear', function (this: any, ...args: any[]) {
    return tf.image.resizeBilinear(this, ...args);
  });
  define('resizeNearestNeighbor', function (this: any, ...args: any[]) {
    return tf.image.resizeNearestNeighbor(this, ...args);
  });
  define('concat', function (this: any, x: any, axis?: number) {
    return tf.concat([this, ...(x instanceof tf.Tensor ? [x] : x)], axis);
  });
  define('stack', function (this: any, x: any, axis?: number) {
    return tf.stack([this, ...(x instanceof tf.Tensor ? [x] : x)], axis);
  });
  define('where', function (this: any, condition: unknown, x: unknown) {
    return tf.where(condition, this, x);
  });
}
