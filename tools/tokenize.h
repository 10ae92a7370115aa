/* tokenize.h: `octopipe tokenize IN.txt -o OUT.bin [--format u16|u32]`:
 * a token file (docs/data.md) from text with the byte-level tokenizer the
 * runtime applies to text data (a token per byte), so that training on
 * OUT gives the same tokens, sample for sample, as training on IN. */
#ifndef OCTO_TOKENIZE_H
#define OCTO_TOKENIZE_H

/* argv[0] is "tokenize".  Returns the exit status: 0, or 1 after a
 * diagnostic ("octopipe tokenize: error: ..."). */
int tok_main(int argc, char **argv);

#endif
